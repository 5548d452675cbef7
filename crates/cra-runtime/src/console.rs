//! The operator's web console at `/console`: static files compiled into the binary
//! (`crates/cra-runtime/console/`, plain ES modules with no build step), served without
//! credentials because they hold no data. Every datum the page shows comes from the API with the
//! key the operator signs in with, so roles are the server's, never the page's.
//!
//! Every answer carries a Content-Security-Policy that allows script only from the console's own
//! files (no inline script, no `eval`), connections only to this origin (HTTP and WebSocket), and
//! no framing; `specs/console.md` says what each directive is for.

use axum::Router;
use axum::extract::Path;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LOCATION,
    REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::AppState;

/// The policy sent with every console answer: script, style, images and connections from this
/// origin only; no inline script or `eval`; no plugins, frames, form posts or `<base>`.
pub(crate) const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One file of the console.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// The console's files, by the name they are served under (`/console/NAME`).
const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../console/index.html"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../console/console.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/api.js"),
    },
    Asset {
        name: "views.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/views.js"),
    },
    Asset {
        name: "dom.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/dom.js"),
    },
];

/// The console's routes (public: see [`is_console_path`]).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(redirect))
        .route("/console/", get(index))
        .route("/console/{name}", get(asset))
}

/// Whether `path` is one of the console's files, which are served without credentials.
pub(crate) fn is_console_path(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

async fn redirect() -> Response {
    (
        StatusCode::MOVED_PERMANENTLY,
        [(LOCATION, HeaderValue::from_static("/console/"))],
    )
        .into_response()
}

async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    serve(&name, &headers)
}

/// Answers one file with its type, an entity tag (its SHA-256), `no-cache` (revalidated on each
/// load, so a new binary's console is never mixed with an old one's), and the security headers;
/// 304 when the browser already holds it.
fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return ApiError::not_found(format!(
            "the console has no file `{name}`; open /console/ for the console"
        ))
        .into_response();
    };
    let tag = format!("\"{}\"", hex::encode(&Sha256::digest(asset.body)[..16]));
    let fresh = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(ETAG, v);
    }
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE),
    );
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: every file the page loads is served, so a module added to `index.html` or
    /// imported by another and forgotten here fails this test rather than a browser.
    #[test]
    fn every_file_the_console_loads_is_served() {
        let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        for asset in ASSETS {
            let text = std::str::from_utf8(asset.body).expect("console files are UTF-8");
            for referenced in references(text) {
                assert!(
                    names.contains(&referenced.as_str()),
                    "{} loads `{referenced}`, which the console does not serve",
                    asset.name
                );
            }
        }
    }

    /// Invariant: no inline script or handler attribute, which the policy would block.
    #[test]
    fn the_page_has_no_inline_script() {
        let html = std::str::from_utf8(ASSETS[0].body).expect("UTF-8");
        for (i, part) in html.split("<script").enumerate().skip(1) {
            let tag = part.split('>').next().unwrap_or_default();
            assert!(tag.contains("src="), "script {i} of index.html is inline");
        }
        assert!(
            !html.contains(" onclick="),
            "index.html has a handler attribute"
        );
        assert!(!html.contains("style="), "index.html has an inline style");
    }

    /// The `./NAME` files a console file refers to (module imports, `src` and `href`).
    fn references(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for quote in ['"', '\''] {
            let marker = format!("{quote}./");
            for part in text.split(marker.as_str()).skip(1) {
                if let Some(name) = part.split(quote).next() {
                    out.push(name.to_owned());
                }
            }
        }
        out
    }
}

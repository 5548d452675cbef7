//! The pages a browser opens: the operator's web console at `/console/` (`crates/cra-runtime/
//! console/`, plain ES modules with no build step) and the API's interactive documentation at
//! `/docs/` (Swagger UI, vendored in `crates/cra-runtime/docs-ui/vendor/`, on `/openapi.json`).
//! Their files are compiled into the binary and served without credentials because they hold no
//! data: every datum the console shows comes from the API with the key the operator signs in
//! with, so roles are the server's, never the page's.
//!
//! Every answer carries a Content-Security-Policy that allows script only from the pages' own
//! files (no inline script, no `eval`), connections only to this origin (HTTP and WebSocket), and
//! no framing; `specs/console.md` says what each directive is for.

use std::sync::LazyLock;

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

/// One file of a page, compiled in.
struct Asset {
    name: &'static str,
    body: &'static [u8],
}

/// The file `$name` of folder `$dir` (beside `src/`), served under `$name`.
macro_rules! asset {
    ($dir:literal, $name:literal) => {
        Asset {
            name: $name,
            body: include_bytes!(concat!("../", $dir, "/", $name)),
        }
    };
}

/// The documentation's policy: the console's, but Swagger UI sets `style` attributes and
/// `<style>` elements as it draws, so styles may be inline (scripts still may not).
pub(crate) const DOCS_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
     font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The documentation's files (`/docs/NAME`): its page and start, then Swagger UI as vendored.
const DOCS: &[Asset] = &[
    asset!("docs-ui", "index.html"),
    asset!("docs-ui", "docs.js"),
    asset!("docs-ui/vendor", "swagger-ui-bundle.js"),
    asset!("docs-ui/vendor", "swagger-ui.css"),
];

/// The console's files, by the name they are served under (`/console/NAME`).
const ASSETS: &[Asset] = &[
    asset!("console", "index.html"),
    asset!("console", "console.css"),
    asset!("console", "app.js"),
    asset!("console", "api.js"),
    asset!("console", "views.js"),
    asset!("console", "dom.js"),
];

/// A file as it is answered: its type from its name's extension, and its entity tag (the first
/// 16 bytes of its SHA-256), both worked out once (the Swagger UI bundle is 1.7 MB).
struct Served {
    asset: &'static Asset,
    content_type: &'static str,
    etag: HeaderValue,
}

fn served(assets: &'static [Asset]) -> Vec<Served> {
    assets
        .iter()
        .map(|asset| Served {
            asset,
            content_type: match asset.name.rsplit('.').next() {
                Some("html") => "text/html; charset=utf-8",
                Some("css") => "text/css; charset=utf-8",
                Some("js") => "text/javascript; charset=utf-8",
                _ => "application/octet-stream",
            },
            etag: HeaderValue::from_str(&format!(
                "\"{}\"",
                hex::encode(&Sha256::digest(asset.body)[..16])
            ))
            .unwrap_or_else(|_| HeaderValue::from_static("\"\"")),
        })
        .collect()
}

static CONSOLE_FILES: LazyLock<Vec<Served>> = LazyLock::new(|| served(ASSETS));
static DOCS_FILES: LazyLock<Vec<Served>> = LazyLock::new(|| served(DOCS));

/// The pages' routes (public: see [`is_page_path`]).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(|| redirect("/console/")))
        .route(
            "/console/",
            get(|h: HeaderMap| async move { console("index.html", &h) }),
        )
        .route(
            "/console/{name}",
            get(|Path(name): Path<String>, h: HeaderMap| async move { console(&name, &h) }),
        )
        .route("/docs", get(|| redirect("/docs/")))
        .route(
            "/docs/",
            get(|h: HeaderMap| async move { docs("index.html", &h) }),
        )
        .route(
            "/docs/{name}",
            get(|Path(name): Path<String>, h: HeaderMap| async move { docs(&name, &h) }),
        )
        .route("/openapi.json", get(openapi))
}

/// Whether `path` is one of the pages' files or the API description, served without
/// credentials.
pub(crate) fn is_page_path(path: &str) -> bool {
    ["/console", "/docs"]
        .iter()
        .any(|p| path == *p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
        || path == "/openapi.json"
}

async fn redirect(to: &'static str) -> Response {
    (
        StatusCode::MOVED_PERMANENTLY,
        [(LOCATION, HeaderValue::from_static(to))],
    )
        .into_response()
}

fn console(name: &str, headers: &HeaderMap) -> Response {
    serve(
        &CONSOLE_FILES,
        CONTENT_SECURITY_POLICY_VALUE,
        name,
        headers,
        "/console/",
    )
}

fn docs(name: &str, headers: &HeaderMap) -> Response {
    serve(&DOCS_FILES, DOCS_POLICY, name, headers, "/docs/")
}

/// `GET /openapi.json`: the API's description as this binary generates it (the document
/// `schemas/openapi.json` commits).
async fn openapi() -> Response {
    static DOCUMENT: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(crate::openapi::openapi_json);
    ([(CONTENT_TYPE, "application/json")], DOCUMENT.as_str()).into_response()
}

/// Answers one file with its type, its entity tag, `no-cache` (revalidated on each
/// load, so a new binary's console is never mixed with an old one's), and the security headers;
/// 304 when the browser already holds it.
fn serve(
    files: &[Served],
    policy: &'static str,
    name: &str,
    headers: &HeaderMap,
    home: &str,
) -> Response {
    let Some(file) = files.iter().find(|f| f.asset.name == name) else {
        return ApiError::not_found(format!("there is no file `{name}` here; open {home}"))
            .into_response();
    };
    let fresh = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim().as_bytes() == file.etag.as_bytes())
        });
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(CONTENT_TYPE, file.content_type)], file.asset.body).into_response()
    };
    let h = resp.headers_mut();
    h.insert(ETAG, file.etag.clone());
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(policy));
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
        let names: Vec<&str> = ASSETS.iter().chain(DOCS).map(|a| a.name).collect();
        for asset in ASSETS.iter().chain(&DOCS[..2]) {
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

    /// Invariant: the vendored Swagger UI is exactly what `tools/vendor-swagger-ui.sh` wrote:
    /// each file's SHA-256 is the one `VENDORED` records.
    #[test]
    fn the_vendored_swagger_ui_is_as_vendored() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs-ui/vendor");
        let manifest = std::fs::read_to_string(dir.join("VENDORED")).expect("VENDORED");
        let mut lines = manifest.lines();
        assert!(
            lines
                .next()
                .is_some_and(|l| l.starts_with("swagger-ui-dist "))
        );
        let mut checked = 0;
        for line in lines {
            let (want, file) = line.split_once("  ").expect("`<sha256>  <file>` lines");
            let bytes = std::fs::read(dir.join(file)).expect("a vendored file");
            assert_eq!(
                hex::encode(Sha256::digest(&bytes)),
                want,
                "{file} differs from VENDORED: run tools/vendor-swagger-ui.sh"
            );
            checked += 1;
        }
        for served in &DOCS[2..] {
            assert!(
                manifest.contains(&format!("  {}", served.name)),
                "{} is not in VENDORED",
                served.name
            );
        }
        assert!(checked >= 4);
    }

    /// Invariant: no inline script or handler attribute, which the policy would block.
    #[test]
    fn the_page_has_no_inline_script() {
        for html in [ASSETS[0].body, DOCS[0].body] {
            page_has_no_inline_script(std::str::from_utf8(html).expect("UTF-8"));
        }
    }

    fn page_has_no_inline_script(html: &str) {
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

//! `cra relay` server mode: each operation is a call to the runtime's Relay routes
//! (specs/relay.md, "HTTP"), with a bearer token, over a blocking HTTP client. The server's
//! answers are printed as they come, so both modes print the same JSON; an error body from the
//! server is a refusal (exit 2), an unreachable server or an answer that is not the expected
//! shape is a failure to run (exit 1).

use std::path::Path;
use std::time::Duration;

use cra_relay::export::BUNDLE_MEDIA_TYPE;
use cra_relay::fact::{FactQuery, FactView};
use cra_relay::store::SearchQuery;
use cra_wire::ErrorBody;
use reqwest::Method;
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};

use crate::cmd::client::enc;

use super::{Answer, Backend, Failure, Output, deposit_project, import_files, write_export};

/// How long one call may take (an export or import of a large store is one call).
const TIMEOUT: Duration = Duration::from_secs(600);

/// A server and the credential used with it.
pub(super) struct Remote {
    base: String,
    token: String,
    http: Client,
}

/// `path?k=v&...` with the values encoded; pairs whose value is `None` are left out.
fn with_query(path: &str, pairs: &[(&str, Option<String>)]) -> String {
    let q: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", enc(v))))
        .collect();
    if q.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", q.join("&"))
    }
}

impl Remote {
    /// A client of the server at `url`, authenticating with `token`, or else with the admin key
    /// the server wrote into the data directory `data`.
    pub(super) fn connect(url: &str, token: Option<String>, data: &Path) -> Result<Self, Failure> {
        let token = token
            .filter(|t| !t.is_empty())
            .or_else(|| cra_runtime::auth::local_admin_token(data))
            .ok_or_else(|| {
                Failure::CouldNotRun(format!(
                    "no credential for {url}: pass --token (or set CRA_TOKEN), or point --data at \
                     the server's data directory, whose api-keys.toml holds its admin key \
                     (looked in {})",
                    data.display()
                ))
            })?;
        let http = cra_runtime::tls::blocking_http_client()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| Failure::CouldNotRun(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// Sends; a 2xx answer is returned, anything else becomes a refusal with the server's body.
    fn send(&self, rb: RequestBuilder) -> Result<Response, Failure> {
        let resp = rb.send().map_err(|e| {
            Failure::CouldNotRun(format!(
                "cannot reach the server at {}: {}; is `cra serve` running there?",
                self.base,
                cra_runtime::tls::explain(&e)
            ))
        })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let bytes = resp.bytes().map_err(|e| {
            Failure::CouldNotRun(format!("the server's {status} answer broke off: {e}"))
        })?;
        match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => Err(Failure::Refused(body)),
            Err(_) => Err(Failure::CouldNotRun(format!(
                "the server answered {status} without an error body: {}",
                String::from_utf8_lossy(&bytes)
            ))),
        }
    }

    /// Sends and reads the JSON answer, with its status code.
    fn json(&self, rb: RequestBuilder) -> Result<(u16, Value), Failure> {
        let resp = self.send(rb)?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .map_err(|e| Failure::CouldNotRun(format!("the answer broke off: {e}")))?;
        let v = cra_wire::json::parse_strict(&bytes)
            .map_err(|e| Failure::CouldNotRun(format!("the server's answer is not JSON ({e})")))?;
        Ok((status, v))
    }

    fn get(&self, path: &str) -> Answer {
        Ok(self.json(self.request(Method::GET, path))?.1)
    }

    fn post(&self, path: &str, body: &Value) -> Result<(u16, Value), Failure> {
        self.json(
            self.request(Method::POST, path)
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string()),
        )
    }
}

fn listing_query(q: &SearchQuery, mode: &str) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("mode", Some(mode.to_owned())),
        ("limit", Some(q.limit.to_string())),
        (
            "query",
            Some(q.query.clone()).filter(|_| mode == "relevant"),
        ),
        ("topic", q.topic.clone()),
        ("package_type", q.package_type.clone()),
        ("tags", Some(q.tags.join(",")).filter(|t| !t.is_empty())),
        ("since", q.since.clone()),
        ("until", q.until.clone()),
    ]
}

impl Backend for Remote {
    fn create_project(&self, project_id: &str, name: &str) -> Answer {
        Ok(self
            .post(
                "/v1/projects",
                &json!({"project_id": project_id, "name": name}),
            )?
            .1)
    }

    fn set_archived(&self, project_id: &str, archived: bool) -> Answer {
        let verb = if archived { "archive" } else { "unarchive" };
        Ok(self
            .post(
                &format!("/v1/projects/{}/{verb}", enc(project_id)),
                &json!({}),
            )?
            .1)
    }

    fn deposit(&self, package: &Value) -> Answer {
        let project = deposit_project(package)?;
        let (status, stored) =
            self.post(&format!("/v1/projects/{}/packages", enc(project)), package)?;
        // 201: stored now; 200: an identical package was already stored (L1 idempotence).
        Ok(json!({"created": status == 201, "package": stored}))
    }

    fn pull_specific(&self, package_id: &str, project: Option<&str>) -> Answer {
        self.get(&package_path(package_id, project, ""))
    }

    fn pull_latest(&self, query: &SearchQuery, _filtered: bool) -> Answer {
        let path = format!("/v1/projects/{}/packages", enc(&query.project_id));
        self.get(&with_query(&path, &listing_query(query, "latest")))
    }

    fn pull_relevant(&self, query: &SearchQuery) -> Answer {
        let path = format!("/v1/projects/{}/packages", enc(&query.project_id));
        self.get(&with_query(&path, &listing_query(query, "relevant")))
    }

    fn orient(
        &self,
        project_id: &str,
        window_days: u32,
        markdown: bool,
    ) -> Result<Output, Failure> {
        let path = with_query(
            &format!("/v1/projects/{}/orient", enc(project_id)),
            &[
                ("window_days", Some(window_days.to_string())),
                ("format", markdown.then(|| "markdown".to_owned())),
            ],
        );
        if !markdown {
            return Ok(Output::Json(self.get(&path)?));
        }
        let text = self
            .send(self.request(Method::GET, &path))?
            .text()
            .map_err(|e| Failure::CouldNotRun(format!("the briefing broke off: {e}")))?;
        Ok(Output::Text(text))
    }

    fn assert_fact(&self, project_id: &str, body: &Value) -> Answer {
        Ok(self
            .post(&format!("/v1/projects/{}/facts", enc(project_id)), body)?
            .1)
    }

    fn invalidate_fact(&self, project_id: &str, subject: &str, predicate: &str) -> Answer {
        let path = with_query(
            &format!("/v1/projects/{}/facts", enc(project_id)),
            &[
                ("subject", Some(subject.to_owned())),
                ("predicate", Some(predicate.to_owned())),
            ],
        );
        Ok(self.json(self.request(Method::DELETE, &path))?.1)
    }

    fn facts(&self, project_id: &str, query: &FactQuery) -> Answer {
        let (as_of, recorded_as_of, history) = match &query.view {
            FactView::Current => (None, None, None),
            FactView::AsOfValid(t) => (Some(t.clone()), None, None),
            FactView::AsOfRecorded(t) => (None, Some(t.clone()), None),
            FactView::History => (None, None, Some("true".to_owned())),
        };
        self.get(&with_query(
            &format!("/v1/projects/{}/facts", enc(project_id)),
            &[
                ("subject", query.subject.clone()),
                ("predicate", query.predicate.clone()),
                ("as_of", as_of),
                ("recorded_as_of", recorded_as_of),
                ("history", history),
            ],
        ))
    }

    fn flag(
        &self,
        package_id: &str,
        project: Option<&str>,
        review_type: &str,
        note: Option<&str>,
    ) -> Answer {
        Ok(self
            .post(
                &package_path(package_id, project, "/flag"),
                &json!({"review_type": review_type, "note": note}),
            )?
            .1)
    }

    fn review(
        &self,
        package_id: &str,
        project: Option<&str>,
        outcome: &str,
        note: Option<&str>,
    ) -> Answer {
        Ok(self
            .post(
                &package_path(package_id, project, "/review"),
                &json!({"outcome": outcome, "note": note}),
            )?
            .1)
    }

    fn start_session(&self, project_id: &str) -> Answer {
        let path = format!("/v1/projects/{}/sessions", enc(project_id));
        Ok(self.post(&path, &json!({}))?.1)
    }

    fn session(&self, project_id: &str, session_id: &str) -> Answer {
        self.get(&format!(
            "/v1/projects/{}/sessions/{}",
            enc(project_id),
            enc(session_id)
        ))
    }

    fn end_session(&self, project_id: &str, session_id: &str) -> Answer {
        let path = format!(
            "/v1/projects/{}/sessions/{}/end",
            enc(project_id),
            enc(session_id)
        );
        Ok(self.post(&path, &json!({}))?.1)
    }

    fn export(&self, dir: &Path, project: Option<&str>) -> Answer {
        let path = match project {
            Some(p) => format!("/v1/projects/{}/export", enc(p)),
            None => "/v1/export".to_owned(),
        };
        let bytes = self
            .send(
                self.request(Method::GET, &path)
                    .header(ACCEPT, BUNDLE_MEDIA_TYPE),
            )?
            .bytes()
            .map_err(|e| Failure::CouldNotRun(format!("the export broke off: {e}")))?;
        write_export(dir, &bytes)
    }

    fn import(&self, dir: &Path, members: &[String]) -> Answer {
        let (body, answer) = import_files(dir)?;
        let path = with_query(
            "/v1/import",
            &[("members", Some(members.join(",")).filter(|m| !m.is_empty()))],
        );
        self.json(
            self.request(Method::POST, &path)
                .header(CONTENT_TYPE, BUNDLE_MEDIA_TYPE)
                .body(body),
        )?;
        Ok(answer)
    }
}

/// The route of package `package_id` (`suffix`: "", "/flag", "/review"): project-scoped when
/// `project` is named, else the unscoped route (409 `ambiguous_package_id` when several
/// readable projects hold the id).
fn package_path(package_id: &str, project: Option<&str>, suffix: &str) -> String {
    match project {
        Some(p) => format!(
            "/v1/projects/{}/packages/{}{suffix}",
            enc(p),
            enc(package_id)
        ),
        None => format!("/v1/packages/{}{suffix}", enc(package_id)),
    }
}

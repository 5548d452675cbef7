//! The HTTP target: plays fixtures against any server over plain HTTP (no TLS), mapping each
//! abstract verb to the route of the HTTP contract documented in `conformance/README.md`.
//!
//! Setup goes through the same routes (the clock, atlases, projects, sessions, packages, facts,
//! setup steps). Verbs with no route of their own (pure computations such as `canonical_trace`,
//! `replay`, `export_import`) go to the evaluation route `POST /v1/conformance/eval/{verb}`; a
//! server that does not offer a route (404/405/501) gets `not_implemented` for that case. The
//! case's clock (`setup.now`, `at_seconds`) is set with `POST /v1/conformance/clock` when the
//! server offers it; without it, only the cases that move the clock are `not_implemented`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::Method;
use reqwest::blocking::Client;
use serde_json::{Map, Value, json};

use crate::fixture::Fixture;
use crate::target::ws::{StreamRead, StreamRequest};
use crate::target::{Outcome, Target, classify, resolve_step_refs, setup_now, setup_steps};

/// A server under test.
#[derive(Debug)]
pub struct HttpTarget {
    transport: Box<dyn Transport>,
    token: Option<String>,
    actor_tokens: BTreeMap<String, String>,
    claims: Vec<String>,
    /// Set once the server has answered that its clock cannot be set.
    no_clock: AtomicBool,
}

/// How requests reach the server: a socket ([`Socket`]), or an in-process router.
pub trait Transport: Send + Sync + std::fmt::Debug {
    /// Where requests go, for the report.
    fn name(&self) -> String;
    /// Sends one request; returns the status and the body text.
    fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> Result<(u16, String), String>;
    /// Reads a WebSocket trace stream ([`crate::target::ws`]).
    fn stream(&self, request: &StreamRequest) -> Result<StreamRead, String>;
}

/// Plain HTTP over TCP (no TLS).
#[derive(Debug, Clone)]
pub struct Socket {
    base: String,
    client: Client,
}

impl Transport for Socket {
    fn name(&self) -> String {
        self.base.clone()
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> Result<(u16, String), String> {
        let url = format!("{}{path}", self.base);
        let m = Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let mut req = self.client.request(m, &url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().map_err(|e| format!("{method} {url}: {e}"))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .map_err(|e| format!("{method} {url}: reading the body: {e}"))?;
        Ok((status, text))
    }

    fn stream(&self, request: &StreamRequest) -> Result<StreamRead, String> {
        crate::target::ws::read_stream_blocking(&self.base, request)
    }
}

/// Why a call could not be made or understood.
enum Fail {
    NotImplemented(String),
    Errored(String),
}

impl HttpTarget {
    /// A target at `base` (e.g. `http://127.0.0.1:8080`), authenticating with `token` when given.
    /// Its claims are read from `GET /v1/conformance` (`conformance_level` and `cra_levels`).
    ///
    /// `actor_tokens` maps an actor id to its token: a request whose body names an actor
    /// (`requester.agent_id`, `created_by.id`) is sent with that actor's token, since a server
    /// refuses a body naming another actor than the caller (`identity_mismatch`).
    pub fn connect(
        base: &str,
        token: Option<String>,
        actor_tokens: BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let client = cra_runtime::tls::blocking_http_client()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        let socket = Socket {
            base: base.trim_end_matches('/').to_owned(),
            client,
        };
        Self::over(Box::new(socket), token, actor_tokens)
    }

    /// A target over any transport; claims are read from `GET /v1/conformance`.
    pub fn over(
        transport: Box<dyn Transport>,
        token: Option<String>,
        actor_tokens: BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let mut t = Self {
            transport,
            token,
            actor_tokens,
            claims: Vec::new(),
            no_clock: AtomicBool::new(false),
        };
        let (status, body) = t
            .call(Method::GET, "/v1/conformance", None)
            .map_err(|e| match e {
                Fail::NotImplemented(m) | Fail::Errored(m) => m,
            })?;
        if status == 200 {
            if let Some(l) = body.get("conformance_level").and_then(Value::as_str) {
                t.claims.push(l.to_owned());
            }
            for l in body
                .get("cra_levels")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(l) = l.as_str() {
                    t.claims.push(l.to_owned());
                }
            }
        }
        Ok(t)
    }

    fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<(u16, Value), Fail> {
        self.call_as(method, path, body, true)
    }

    fn token_for(&self, body: Option<&Value>) -> Option<&String> {
        let actor = body.and_then(|b| {
            b.pointer("/requester/agent_id")
                .or_else(|| b.pointer("/created_by/id"))
                .or_else(|| b.pointer("/package/created_by/id"))
                .or_else(|| b.pointer("/agent_id"))
                .and_then(Value::as_str)
        });
        actor
            .and_then(|a| self.actor_tokens.get(a))
            .or(self.token.as_ref())
    }

    fn call_as(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        authenticated: bool,
    ) -> Result<(u16, Value), Fail> {
        let token = if authenticated {
            self.token_for(body).map(String::as_str)
        } else {
            None
        };
        self.call_with(method, path, body, token)
    }

    fn call_with(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        token: Option<&str>,
    ) -> Result<(u16, Value), Fail> {
        // A string body is sent as is (to test unparsable bodies); anything else as JSON.
        let text = body.map(|b| b.as_str().map_or_else(|| b.to_string(), str::to_owned));
        let (status, text) = self
            .transport
            .send(method.as_str(), path, token, text)
            .map_err(Fail::Errored)?;
        let value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok((status, value))
    }

    /// Calls a route; a missing route is `not_implemented`; an error status is folded into the
    /// answer as `status` beside the server's error body (or, for a refusing execute response,
    /// beside its `error.code`, the response kept as `response`).
    fn route(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, Fail> {
        self.route_as(method, path, body, None)
    }

    /// As [`HttpTarget::route`], sent with the token of `actor` when one is named (a step's `as`
    /// argument) instead of the token the body's actor or the default token would choose.
    fn route_as(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        actor: Option<&str>,
    ) -> Result<Value, Fail> {
        let (status, value) = match actor {
            None => self.call(method.clone(), path, body)?,
            Some(a) => {
                let token = self.actor_tokens.get(a).ok_or_else(|| {
                    Fail::Errored(format!(
                        "the case acts as `{a}`: pass its token with --actor-token {a}=TOKEN"
                    ))
                })?;
                self.call_with(method.clone(), path, body, Some(token))?
            }
        };
        answer_of(&method, path, status, value)
    }

    /// The `stream` verb: reads `GET /v1/traces/stream` for `session_id` (from `since_seq`),
    /// ending the session once the stream is open when `end_session` is true, or stopping after
    /// `limit` events. Answers the sequences and event types read, in order, and the server's
    /// close frame (`null` when the runner closed first).
    fn stream(&self, args: &Value) -> Result<Value, Fail> {
        let session = args
            .get("session_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut path = format!("/v1/traces/stream?session_id={}", enc(session));
        if let Some(since) = args.get("since_seq") {
            let since = since
                .as_str()
                .map_or_else(|| since.to_string(), str::to_owned);
            path.push_str(&format!("&since_seq={}", enc(&since)));
        }
        let ends = args.get("end_session").and_then(Value::as_bool) == Some(true);
        let request = StreamRequest {
            path: path.clone(),
            token: self.token.clone(),
            end_path: ends.then(|| format!("/v1/sessions/{}", enc(session))),
            limit: args
                .get("limit")
                .and_then(Value::as_u64)
                .and_then(|l| usize::try_from(l).ok()),
        };
        let read = self.transport.stream(&request).map_err(Fail::Errored)?;
        if read.status != 101 {
            let text = read.body.unwrap_or_default();
            let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            return answer_of(&Method::GET, &path, read.status, value);
        }
        let mut sequences = Vec::new();
        let mut types = Vec::new();
        for m in &read.messages {
            let event: Value = serde_json::from_str(m)
                .map_err(|e| Fail::Errored(format!("a stream message is not JSON: {e}: {m}")))?;
            sequences.push(event.get("sequence").cloned().unwrap_or(Value::Null));
            types.push(event.get("event_type").cloned().unwrap_or(Value::Null));
        }
        let close = read
            .close
            .map(|(code, reason)| json!({"code": code, "reason": reason}));
        Ok(json!({"sequences": sequences, "event_types": types, "close": close}))
    }
}

/// A route's answer: a missing route is `not_implemented`; an error status is folded into the
/// answer as `status` beside the server's error body (or, for a refusing execute response,
/// beside its `error.code`, the response kept as `response`).
fn answer_of(method: &Method, path: &str, status: u16, value: Value) -> Result<Value, Fail> {
    // A missing route: 405, 501 `not_implemented`, or a 404 whose body is not one of the
    // protocol's specific not-found tokens (no body, or the generic `not_found`).
    // (An execute response names its token in `error.code`.)
    let token = value
        .get("error")
        .and_then(Value::as_str)
        .or_else(|| value.pointer("/error/code").and_then(Value::as_str));
    let generic_404 = status == 404 && matches!(token, None | Some("not_found"));
    if status == 405 || generic_404 {
        return Err(Fail::NotImplemented(format!(
            "{method} {path} is not offered"
        )));
    }
    // A refusing execute response (CARP §3.5): the fixtures' refusal form (its error's
    // token, message and details), the response beside it, as the in-process target answers.
    if status >= 400
        && let Some(code) = value.pointer("/error/code").and_then(Value::as_str)
    {
        let mut v = json!({"error": code, "status": status});
        for k in ["message", "details"] {
            if let Some(x) = value.pointer(&format!("/error/{k}")) {
                v[k] = x.clone();
            }
        }
        v["response"] = value;
        return Ok(v);
    }
    if status >= 400 {
        let mut v = match value {
            Value::Object(o) => Value::Object(o),
            other => json!({"error": "unknown", "body": other}),
        };
        v["status"] = json!(status);
        return Ok(v);
    }
    Ok(value)
}

impl HttpTarget {
    fn perform(&self, op: &str, args: &Value) -> Result<Value, Fail> {
        let s = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let project = enc(&s("project_id"));
        match op {
            "deposit" => {
                let pkg = args.get("package").cloned().unwrap_or(Value::Null);
                let p = args
                    .get("project_id")
                    .or_else(|| pkg.get("project_id"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.route(
                    Method::POST,
                    &format!("/v1/projects/{}/packages", enc(p)),
                    Some(&pkg),
                )
            }
            "pull" => {
                let mode = s("mode");
                let path = match mode.as_str() {
                    "specific" => package_route(args, ""),
                    "awaiting_review" => {
                        format!("/v1/projects/{project}/packages?status=awaiting_review")
                    }
                    _ => {
                        let mut q = format!("/v1/projects/{project}/packages?mode={}", enc(&mode));
                        if let Some(l) = args.get("limit") {
                            q.push_str(&format!("&limit={l}"));
                        }
                        if let Some(x) = args.get("query").and_then(Value::as_str) {
                            q.push_str(&format!("&query={}", enc(x)));
                        }
                        q
                    }
                };
                let v = self.route(Method::GET, &path, None)?;
                Ok(if mode == "specific" {
                    v
                } else {
                    named_list(v, "packages")
                })
            }
            "orient" => {
                let mut q = format!("/v1/projects/{project}/orient");
                if let Some(w) = args.get("window_days") {
                    q.push_str(&format!("?window_days={w}"));
                }
                self.route(Method::GET, &q, None)
            }
            "assert_fact" => self.route(
                Method::POST,
                &format!("/v1/projects/{project}/facts"),
                Some(&strip(args, &["project_id"])),
            ),
            "invalidate_fact" => self.route(
                Method::DELETE,
                &format!(
                    "/v1/projects/{project}/facts?subject={}&predicate={}",
                    enc(&s("subject")),
                    enc(&s("predicate"))
                ),
                None,
            ),
            "get_facts" => {
                let mut q = format!("/v1/projects/{project}/facts?");
                for k in ["subject", "predicate", "as_of", "recorded_as_of", "history"] {
                    if let Some(v) = args.get(k) {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        q.push_str(&format!("{k}={}&", enc(&v)));
                    }
                }
                let v = self.route(Method::GET, q.trim_end_matches(['&', '?']), None)?;
                Ok(named_list(v, "facts"))
            }
            "flag_for_review" => self.route(
                Method::POST,
                &package_route(args, "/flag"),
                Some(&strip(args, &["package_id", "project_id"])),
            ),
            "review" => self.route_as(
                Method::POST,
                &package_route(args, "/review"),
                Some(&strip(args, &["package_id", "project_id", "as"])),
                args.get("as").and_then(Value::as_str),
            ),
            "resolve" | "execute" => {
                let answer = self.route(Method::POST, &format!("/v1/{op}"), args.get("request"))?;
                // A refused request is recorded too (errata), so the trace is read either way.
                if args.get("with_trace").and_then(Value::as_bool) != Some(true) {
                    return Ok(answer);
                }
                let session = args
                    .pointer("/request/requester/session_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let trace =
                    self.route(Method::GET, &format!("/v1/traces/{}", enc(session)), None)?;
                let verified = self.route(
                    Method::POST,
                    &format!("/v1/traces/{}/verify", enc(session)),
                    None,
                )?;
                let valid = verified.get("valid").cloned().unwrap_or(Value::Null);
                // `response` is the execute response itself, also when it refused (the
                // refusal form keeps it under `response`).
                let response = answer.get("response").cloned().unwrap_or(answer.clone());
                Ok(
                    json!({"resolution": answer, "response": response, "trace": trace, "trace_valid": valid}),
                )
            }
            "stream" => self.stream(args),
            "http" => {
                let method = Method::from_bytes(s("method").as_bytes())
                    .map_err(|e| Fail::Errored(format!("http verb: bad method: {e}")))?;
                let anonymous = args
                    .get("anonymous")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                // A path may be given in parts, so a part can be an earlier step's answer
                // (`{"$step": [i, "/decision/approval_id"]}`); they are joined as they are.
                let path = match args.get("path") {
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .map(Value::as_str)
                        .collect::<Option<String>>()
                        .ok_or_else(|| {
                            Fail::Errored("http verb: every part of `path` must be a string".into())
                        })?,
                    _ => s("path"),
                };
                let (status, body) = self.call_as(method, &path, args.get("body"), !anonymous)?;
                Ok(json!({"status": status, "body": body}))
            }
            other => self.route(
                Method::POST,
                &format!("/v1/conformance/eval/{other}"),
                Some(args),
            ),
        }
    }

    /// Creates the setup's state. Returns the id map: a server assigns session ids itself, so
    /// every fixture session id is replaced by the id the server gave (in every later argument).
    fn materialise(&self, fixture: &Fixture) -> Result<Vec<(String, String)>, Fail> {
        let setup = &fixture.setup;
        let mut ids = Vec::new();
        // The case's atlases become the whole set in force (a shared server keeps the previous
        // case's set otherwise), for every case whose answer may depend on them.
        let ops = std::iter::once(fixture.input.operation.clone()).chain(
            setup_steps(fixture)
                .map_err(Fail::Errored)?
                .into_iter()
                .map(|s| s.operation),
        );
        let uses_atlases = setup.contains_key("atlases")
            || ops
                .into_iter()
                .any(|o| ["resolve", "execute", "replay", "http"].contains(&o.as_str()));
        if uses_atlases {
            let atlases = setup.get("atlases").cloned().unwrap_or(json!([]));
            self.expect_ok(Method::PUT, "/v1/atlases", &json!({ "atlases": atlases }))?;
        }
        // A project admits its creator and its members, so the Relay actor the case writes with
        // (the first `created_by` in the fixture) is made a member; `archived_at` becomes the
        // archive route.
        let owner = first_created_by(&Value::Object(setup.clone()))
            .or_else(|| first_created_by(&fixture.input.args));
        // The actors a step or the input acts as (`as`) are members too: a review gate is then
        // what decides, not the project grant.
        let mut members: Vec<String> = owner.into_iter().collect();
        let steps = setup_steps(fixture).map_err(Fail::Errored)?;
        for a in steps
            .iter()
            .map(|s| &s.args)
            .chain(std::iter::once(&fixture.input.args))
            .filter_map(|a| a.get("as").and_then(Value::as_str))
        {
            if !members.iter().any(|m| m == a) {
                members.push(a.to_owned());
            }
        }
        for p in list(setup.get("projects")) {
            let id = p
                .get("project_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let mut body = strip(&p, &["archived_at"]);
            if !members.is_empty() {
                body["members"] = json!(members);
            }
            self.expect_ok(Method::POST, "/v1/projects", &body)?;
            if p.get("archived_at").is_some_and(|a| !a.is_null()) {
                self.expect_ok(
                    Method::POST,
                    &format!("/v1/projects/{}/archive", enc(&id)),
                    &json!({}),
                )?;
            }
        }
        for s in list(setup.get("sessions")) {
            let wanted = s
                .get("session_id")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let body = strip(&s, &["session_id"]);
            let answer = self.route(Method::POST, "/v1/sessions", Some(&body))?;
            if answer.get("error").is_some() {
                return Err(Fail::Errored(format!(
                    "setup POST /v1/sessions answered {answer}"
                )));
            }
            if let (Some(w), Some(got)) = (wanted, answer.get("session_id").and_then(Value::as_str))
            {
                ids.push((w, got.to_owned()));
            }
        }
        if setup.get("events").is_some() {
            return Err(Fail::NotImplemented(
                "setup.events cannot be injected over HTTP (events come from operations)"
                    .to_owned(),
            ));
        }
        for pkg in list(setup.get("packages")) {
            let p = pkg
                .get("project_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            self.expect_ok(
                Method::POST,
                &format!("/v1/projects/{}/packages", enc(p)),
                &pkg,
            )?;
        }
        for f in list(setup.get("facts")) {
            let p = f
                .get("project_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            self.expect_ok(
                Method::POST,
                &format!("/v1/projects/{}/facts", enc(p)),
                &strip(&f, &["project_id"]),
            )?;
        }
        Ok(ids)
    }

    /// Sets the server's clock (`POST /v1/conformance/clock`); `Ok(false)` when the server does
    /// not offer it (remembered, so it is asked once).
    fn set_clock(&self, at: time::OffsetDateTime) -> Result<bool, Fail> {
        if self.no_clock.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let body = json!({ "now": cra_wire::clock::format_timestamp(at) });
        let answer = match self.route(Method::POST, "/v1/conformance/clock", Some(&body)) {
            Err(Fail::NotImplemented(_)) => None,
            Err(e) => return Err(e),
            Ok(v) => match v.get("error").and_then(Value::as_str) {
                Some("not_implemented") => None,
                Some(_) => {
                    return Err(Fail::Errored(format!(
                        "setting the server's clock answered {v}"
                    )));
                }
                None => Some(v),
            },
        };
        if answer.is_none() {
            self.no_clock.store(true, Ordering::Relaxed);
        }
        Ok(answer.is_some())
    }

    fn expect_ok(&self, method: Method, path: &str, body: &Value) -> Result<(), Fail> {
        let v = self.route(method.clone(), path, Some(body))?;
        match v.get("status").and_then(Value::as_u64) {
            Some(s) if s >= 400 && v.get("error").is_some() && s != 409 => {
                Err(Fail::Errored(format!("setup {method} {path} answered {v}")))
            }
            _ => Ok(()),
        }
    }
}

/// Replaces fixture ids by server ids: whole string values, and inside strings (paths).
fn rename(v: &Value, ids: &[(String, String)]) -> Value {
    match v {
        Value::String(s) => {
            let mut out = s.clone();
            for (from, to) in ids {
                out = out.replace(from.as_str(), to);
            }
            Value::String(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| rename(x, ids)).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), rename(x, ids))).collect())
        }
        other => other.clone(),
    }
}

/// A list route may answer a bare JSON array; the verb's answer names it (`{"facts": [...]}`).
fn named_list(v: Value, name: &str) -> Value {
    match v {
        Value::Array(a) => json!({ name: a }),
        other => other,
    }
}

/// The id of the first `created_by` object anywhere in `v`.
fn first_created_by(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => o
            .get("created_by")
            .and_then(|c| c.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| o.values().find_map(first_created_by)),
        Value::Array(a) => a.iter().find_map(first_created_by),
        _ => None,
    }
}

fn list(v: Option<&Value>) -> Vec<Value> {
    v.and_then(Value::as_array).cloned().unwrap_or_default()
}

fn strip(v: &Value, keys: &[&str]) -> Value {
    let mut m: Map<String, Value> = v.as_object().cloned().unwrap_or_default();
    for k in keys {
        m.remove(*k);
    }
    Value::Object(m)
}

/// Percent-encodes a path segment or query value.
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Target for HttpTarget {
    fn name(&self) -> String {
        self.transport.name()
    }

    fn claims(&self) -> Vec<String> {
        self.claims.clone()
    }

    fn play(&self, fixture: &Fixture) -> Outcome {
        let result = (|| -> Result<Value, Fail> {
            let steps = setup_steps(fixture).map_err(Fail::Errored)?;
            // The case runs at `setup.now` on a server whose clock can be set; `at_seconds` (even
            // 0) marks a case that depends on it, which a server without a settable clock cannot
            // play.
            let moves_clock =
                fixture.input.at_seconds.is_some() || steps.iter().any(|s| s.at_seconds.is_some());
            let start = setup_now(fixture).map_err(Fail::Errored)?;
            let settable = self.set_clock(start)?;
            if moves_clock && !settable {
                return Err(Fail::NotImplemented(
                    "the case moves the clock and the server offers no POST /v1/conformance/clock"
                        .to_owned(),
                ));
            }
            let mut now = start;
            let mut move_clock = |at_seconds: Option<i64>| -> Result<(), Fail> {
                let at = start + time::Duration::seconds(at_seconds.unwrap_or(0));
                if settable && at != now {
                    self.set_clock(at)?;
                    now = at;
                }
                Ok(())
            };
            let ids = self.materialise(fixture)?;
            let mut answers = Vec::new();
            for step in steps {
                let args = resolve_step_refs(&step.args, &answers).map_err(Fail::Errored)?;
                move_clock(step.at_seconds)?;
                answers.push(self.perform(&step.operation, &rename(&args, &ids))?);
            }
            let args = resolve_step_refs(&fixture.input.args, &answers).map_err(Fail::Errored)?;
            move_clock(fixture.input.at_seconds)?;
            self.perform(&fixture.input.operation, &rename(&args, &ids))
        })();
        match result {
            Ok(v) => classify(v),
            Err(Fail::NotImplemented(m)) => Outcome::NotImplemented(m),
            Err(Fail::Errored(m)) => Outcome::Errored(m),
        }
    }
}

/// `/v1/packages/{package_id}{suffix}`, scoped with `?project_id=` when the case names a project.
fn package_route(args: &Value, suffix: &str) -> String {
    let id = args.get("package_id").and_then(Value::as_str).unwrap_or("");
    let mut path = format!("/v1/packages/{}{suffix}", enc(id));
    if let Some(p) = args.get("project_id").and_then(Value::as_str) {
        path.push_str(&format!("?project_id={}", enc(p)));
    }
    path
}

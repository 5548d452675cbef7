//! The hostile-input table over HTTP: every case in `fixtures/hostile/*.json` (deep nesting, huge
//! strings and numbers, duplicate keys, invalid UTF-8, NUL bytes, oversize bodies, bad content
//! types, header injection and oversized headers, hostile paths, damaged import bundles) is sent
//! as raw bytes over a TCP connection to a real server, so that nothing a client library would
//! refuse to send is out of reach. Each case must get its documented status and error token
//! (or, for requests that are not well-formed HTTP/1.1, the HTTP layer's bodiless 400/414/431)
//! and leave every store as it was: TRACE chains and events, pending approvals, the whole Relay
//! store, and the atlases in force. After the table, each template the cases damage is sent
//! unchanged and must be accepted, so every refusal is owed to the damage alone.
//!
//! The case format is documented in `fixtures/hostile/README.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// Where the case files are.
fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/hostile")
}

/// The body limit of the server under test (small, so oversize cases stay small).
const BODY_LIMIT: usize = 128 * 1024;

/// An answer read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What the test set up, for `${name}` in the cases.
struct Ctx {
    vars: BTreeMap<String, String>,
    templates: Map<String, Value>,
    bundle: Vec<u8>,
}

impl Ctx {
    /// Replaces every `${name}` of a known name (`${rid}`: a fresh request id each time).
    fn subst(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            match after.find('}') {
                Some(j) if after[..j] == *"rid" => {
                    out.push_str(&rid());
                    rest = &after[j + 1..];
                }
                Some(j) if self.vars.contains_key(&after[..j]) => {
                    out.push_str(&self.vars[&after[..j]]);
                    rest = &after[j + 1..];
                }
                _ => {
                    out.push_str("${");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Substitutes in every string of `v`.
    fn subst_value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.subst(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.subst_value(x)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (self.subst(k), self.subst_value(x)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The bytes a body part spec stands for (see the fixture README).
    fn bytes(&self, spec: &Value, case: &str) -> Vec<u8> {
        match spec {
            Value::Null => Vec::new(),
            Value::String(s) => self.subst(s).into_bytes(),
            Value::Array(parts) => parts.iter().flat_map(|p| self.bytes(p, case)).collect(),
            Value::Object(o) if o.contains_key("hex") => hex(o["hex"].as_str().unwrap()),
            Value::Object(o) if o.contains_key("repeat") => {
                let one = self.bytes(&o["repeat"], case);
                one.repeat(o["times"].as_u64().unwrap() as usize)
            }
            Value::Object(o) if o.contains_key("json") => {
                self.subst_value(&o["json"]).to_string().into_bytes()
            }
            Value::Object(o) if o.contains_key("template") => self.template(o, case),
            Value::Object(o) if o.contains_key("bundle") => {
                let mut b = self.bundle.clone();
                if let Some(n) = o["bundle"].get("truncate").and_then(Value::as_u64) {
                    b.truncate(n as usize);
                }
                b
            }
            other => panic!("case `{case}`: unknown body part {other}"),
        }
    }

    /// A template with `set` (pointer -> value; `{"$raw": parts}` splices bytes,
    /// `{"$repeat": text, "times": n}` is a long string) and `remove` applied.
    fn template(&self, o: &Map<String, Value>, case: &str) -> Vec<u8> {
        let name = o["template"].as_str().unwrap();
        let mut v = self.subst_value(
            self.templates
                .get(name)
                .unwrap_or_else(|| panic!("case `{case}`: no template `{name}`")),
        );
        let mut raws: Vec<Vec<u8>> = Vec::new();
        for p in o
            .get("remove")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let p = p.as_str().unwrap();
            let (parent, last) = p.rsplit_once('/').unwrap();
            v.pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .unwrap_or_else(|| panic!("case `{case}`: no object at `{parent}`"))
                .remove(last);
        }
        for (p, x) in o
            .get("set")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let new = match x {
                Value::Object(m) if m.contains_key("$raw") => {
                    raws.push(self.bytes(&m["$raw"], case));
                    json!(format!("\u{1}raw{}\u{1}", raws.len() - 1))
                }
                Value::Object(m) if m.contains_key("$repeat") => json!(
                    self.subst(m["$repeat"].as_str().unwrap())
                        .repeat(m["times"].as_u64().unwrap() as usize)
                ),
                other => self.subst_value(other),
            };
            let (parent, last) = p.rsplit_once('/').unwrap();
            match v.pointer_mut(parent) {
                Some(Value::Object(m)) => {
                    m.insert(last.replace("~1", "/").replace("~0", "~"), new);
                }
                Some(Value::Array(a)) => {
                    let i: usize = last.parse().unwrap();
                    a[i] = new;
                }
                _ => panic!("case `{case}`: no object or array at `{parent}`"),
            }
        }
        let mut text = v.to_string().into_bytes();
        for (i, raw) in raws.iter().enumerate() {
            let marker = format!("\"\\u0001raw{i}\\u0001\"").into_bytes();
            let at = find(&text, &marker)
                .unwrap_or_else(|| panic!("case `{case}`: raw splice {i} lost"));
            text.splice(at..at + marker.len(), raw.iter().copied());
        }
        text
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn key_of(name: &str) -> &'static str {
    match name {
        "admin" => ADMIN,
        "agent" => AGENT,
        "agent2" => AGENT2,
        "author" => AUTHOR,
        "auditor" => AUDITOR,
        "operator" => OPERATOR,
        "maint" => MAINT,
        other => panic!("unknown key `{other}`"),
    }
}

/// The raw request of `case`.
fn request(ctx: &Ctx, case: &Value) -> Vec<u8> {
    let name = case["name"].as_str().unwrap();
    let method = case["method"].as_str().unwrap_or("POST");
    let path = ctx.bytes(&case["path"], name);
    let body = ctx.bytes(&case["body"], name);
    let mut head = Vec::new();
    match case.get("request_line") {
        Some(line) => head.extend(ctx.bytes(line, name)),
        None => {
            head.extend(method.as_bytes());
            head.push(b' ');
            head.extend(&path);
            head.extend(b" HTTP/1.1");
        }
    }
    head.extend(b"\r\nHost: 127.0.0.1\r\n");
    match case.get("key") {
        Some(Value::Null) => {}
        Some(k) => head
            .extend(format!("Authorization: Bearer {}\r\n", key_of(k.as_str().unwrap())).bytes()),
        None => head.extend(format!("Authorization: Bearer {MAINT}\r\n").bytes()),
    }
    match case.get("content_type") {
        Some(Value::Null) => {}
        Some(ct) => {
            head.extend(b"Content-Type: ");
            head.extend(ctx.bytes(ct, name));
            head.extend(b"\r\n");
        }
        None => head.extend(b"Content-Type: application/json\r\n"),
    }
    for h in case
        .get("headers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        head.extend(ctx.bytes(h, name));
        head.extend(b"\r\n");
    }
    head.extend(b"Connection: close\r\n");
    let framing = case.get("framing").cloned().unwrap_or(json!("length"));
    match &framing {
        Value::String(f) if f == "length" => {
            head.extend(format!("Content-Length: {}\r\n\r\n", body.len()).bytes());
            head.extend(body);
        }
        Value::String(f) if f == "chunked" => {
            head.extend(b"Transfer-Encoding: chunked\r\n\r\n");
            for chunk in body.chunks(8 * 1024) {
                head.extend(format!("{:x}\r\n", chunk.len()).bytes());
                head.extend(chunk);
                head.extend(b"\r\n");
            }
            head.extend(b"0\r\n\r\n");
        }
        Value::String(f) if f == "none" => {
            head.extend(b"\r\n");
            head.extend(body);
        }
        Value::Object(o) if o.contains_key("content_length") => {
            head.extend(b"Content-Length: ");
            head.extend(ctx.bytes(&o["content_length"], name));
            head.extend(b"\r\n\r\n");
            head.extend(body);
        }
        other => panic!("case `{name}`: unknown framing {other}"),
    }
    head
}

/// Sends `raw` on a fresh connection and reads the answer until the server closes it.
async fn exchange(addr: std::net::SocketAddr, raw: &[u8]) -> Answer {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer (and close) before reading everything: a failed write is not the
    // answer, what it sent is.
    let _ = tcp.write_all(raw).await;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tcp.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            // A reset after the answer arrived (unread request bytes) ends the exchange.
            Err(_) if !got.is_empty() => break,
            Err(e) => panic!("no answer: {e}"),
        }
    }
    parse_answer(&got)
}

fn parse_answer(got: &[u8]) -> Answer {
    let end = find(got, b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(got)));
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line `{status_line}`"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let raw_body = &got[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(raw_body)
    } else {
        raw_body.to_vec()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = find(b, b"\r\n") {
        let size = usize::from_str_radix(
            std::str::from_utf8(&b[..eol])
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .trim(),
            16,
        )
        .unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
    out
}

/// Everything a request could have written: TRACE chains and events, pending approvals, the
/// whole Relay store, and the atlases in force (id and digest).
#[derive(Debug, PartialEq)]
struct Records {
    /// Events of the operator audit chain other than its start and atlas refusals.
    operator_changes: usize,
    chains: usize,
    events: u64,
    pending: usize,
    relay: cra_relay::store::Snapshot,
    atlases: Vec<(String, String)>,
}

/// What a refusal may not change. The operator audit chain is counted apart: a refused atlas is
/// recorded there (`atlas.refused`, after the chain's start), which is the record of the
/// refusal, not a change; any other event there is a change.
fn records(s: &TestServer) -> Records {
    let st = &s.server.as_ref().unwrap().state;
    let audit = cra_store::retention::OPERATOR_AUDIT_SESSION;
    let chains: Vec<_> = st
        .backends
        .chains
        .sessions()
        .unwrap()
        .into_iter()
        .filter(|c| c.session_id != audit)
        .collect();
    let operator_changes = st
        .backends
        .chains
        .read_range(audit, 0, u64::MAX)
        .unwrap()
        .iter()
        .filter(|e| !matches!(e.event_type.as_str(), "session.started" | "atlas.refused"))
        .count();
    Records {
        operator_changes,
        chains: chains.len(),
        events: chains.iter().map(|c| c.head.next_sequence).sum(),
        pending: st.backends.carp.list_pending_approvals().unwrap().len(),
        relay: st.relay.store().snapshot().unwrap(),
        atlases: st
            .atlases()
            .loaded
            .iter()
            .map(|a| (a.id().to_owned(), a.digest.clone()))
            .collect(),
    }
}

/// An example atlas as `POST /v1/atlases` takes it.
fn inline_atlas(name: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../atlases")
        .join(name);
    let mut files = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                // Its replay tests and adapter specs are not needed to install it.
                if !p.ends_with("tests") && !p.ends_with("adapters") {
                    stack.push(p);
                }
            } else {
                let rel = p
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                files.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let manifest: Value = serde_json::from_str(&files.remove("atlas.json").unwrap()).unwrap();
    json!({"manifest": manifest, "files": files})
}

/// Replaces every `{"atlas_dir": name}` by the inline atlas.
fn expand_atlases(v: &mut Value) {
    match v {
        Value::Object(o) if o.len() == 1 && o.contains_key("atlas_dir") => {
            *v = inline_atlas(o["atlas_dir"].as_str().unwrap());
        }
        Value::Object(o) => o.values_mut().for_each(expand_atlases),
        Value::Array(a) => a.iter_mut().for_each(expand_atlases),
        _ => {}
    }
}

/// Every case of every table file, with its file name.
fn load_cases() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && !p.file_name().unwrap().to_string_lossy().starts_with('_')
        })
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for f in files {
        let table: Value = serde_json::from_slice(&std::fs::read(&f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let file = f.file_name().unwrap().to_string_lossy().into_owned();
        for c in table["cases"].as_array().unwrap() {
            cases.push((file.clone(), c.clone()));
        }
    }
    cases
}

/// Checks one answer against the case's `expect`.
fn check(case: &Value, got: &Answer) -> Result<(), String> {
    let expect = &case["expect"];
    let status = expect["status"].as_u64().unwrap() as u16;
    if got.status != status {
        return Err(format!(
            "status {} (wanted {status}); body {}",
            got.status,
            got.text()
        ));
    }
    // No request may put a header of its choosing into the answer.
    for (k, v) in &got.headers {
        if k == "set-cookie" || k.contains("injected") || v.contains("injected") {
            return Err(format!("the answer carries `{k}: {v}`"));
        }
    }
    if expect["empty"] == json!(true) {
        // Refused by the HTTP layer before any route: no body at all.
        if !got.body.is_empty() {
            return Err(format!("wanted no body, got {}", got.text()));
        }
        return Ok(());
    }
    let body = got.json();
    if let Some(token) = expect["token"].as_str() {
        if body["error"] != token {
            return Err(format!(
                "token {} (wanted {token}); body {}",
                body["error"],
                got.text()
            ));
        }
        if body["message"].as_str().is_none_or(str::is_empty) {
            return Err(format!("no message; body {}", got.text()));
        }
        let ct = got.headers.iter().find(|(k, _)| k == "content-type");
        if !ct.is_some_and(|(_, v)| v.starts_with("application/json")) {
            return Err(format!("error body not declared JSON: {ct:?}"));
        }
    } else if status >= 400 {
        return Err("a refusal case names its token (or `empty`)".into());
    }
    if let Some(pointer) = expect["pointer"].as_str() {
        let got_pointer = &body["details"]["errors"][0]["pointer"];
        if got_pointer != pointer {
            return Err(format!(
                "pointer {got_pointer} (wanted {pointer}); body {}",
                got.text()
            ));
        }
    }
    Ok(())
}

/// The server, the sessions, resolution, approval, project and package the cases refer to.
async fn setup() -> (TestServer, Ctx) {
    let (url, _calls) = executor_endpoint().await;
    let s = TestServer::start_with(move |c| {
        c.limits.max_body_bytes = BODY_LIMIT;
        c.executors.insert(
            "github".into(),
            cra_runtime::config::ExecutorConfig::http(url, 5_000),
        );
    })
    .await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let other = s.open_session(AGENT2, "other-bot").await;
    let (st, res) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &rid(), &["repo-read"]),
        )
        .await;
    assert_eq!(st, 200, "{res}");
    let resolution = res["resolution_id"].as_str().unwrap().to_owned();
    let (st, gated) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]),
        )
        .await;
    assert_eq!(st, 200, "{gated}");
    let approval = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &gated)
        .await;
    let (st, p) = s
        .post(
            Some(MAINT),
            "/v1/projects",
            &json!({"project_id": "proj-h", "name": "Hostile"}),
        )
        .await;
    assert_eq!(st, 201, "{p}");
    let mut templates: Value =
        serde_json::from_slice(&std::fs::read(fixture_dir().join("_templates.json")).unwrap())
            .unwrap();
    expand_atlases(&mut templates);
    let mut ctx = Ctx {
        vars: BTreeMap::from([
            ("session".into(), sid),
            ("other_session".into(), other),
            ("resolution".into(), resolution),
            ("approval".into(), approval),
            ("project".into(), "proj-h".into()),
            ("package".into(), "pkg_h1".into()),
            (
                "unknown".into(),
                "01890000-0000-7000-8000-000000000000".into(),
            ),
        ]),
        templates: templates.as_object().unwrap().clone(),
        bundle: Vec::new(),
    };
    // A draft package to flag and review.
    let mut pkg = ctx.subst_value(&ctx.templates["package"]);
    pkg["package_id"] = json!("pkg_h1");
    pkg["status"] = json!("draft");
    let (st, d) = s
        .post(Some(MAINT), "/v1/projects/proj-h/packages", &pkg)
        .await;
    assert_eq!(st, 201, "{d}");
    // The export bundle the import cases damage.
    let resp = s
        .http
        .get(s.url("/v1/export"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    ctx.bundle = resp.bytes().await.unwrap().to_vec();
    (s, ctx)
}

/// Each template, unchanged, in an order where each is accepted: what the cases damage is valid.
async fn controls(s: &TestServer, ctx: &Ctx) {
    let addr = s.server.as_ref().unwrap().addr;
    let t = |name: &str| json!({"template": name});
    let steps: Vec<(&str, &str, &str, Value, u16)> = vec![
        ("session", "maint", "/v1/sessions", t("session"), 201),
        ("resolve", "maint", "/v1/resolve", t("resolve"), 200),
        ("execute", "maint", "/v1/execute", t("execute"), 200),
        (
            "decide",
            "operator",
            "/v1/approvals/${approval}",
            t("decide"),
            200,
        ),
        ("project", "maint", "/v1/projects", t("project"), 201),
        (
            "package",
            "maint",
            "/v1/projects/${project}/packages",
            t("package"),
            201,
        ),
        (
            "fact",
            "maint",
            "/v1/projects/${project}/facts",
            t("fact"),
            201,
        ),
        (
            "flag",
            "maint",
            "/v1/packages/${package}/flag",
            t("flag"),
            200,
        ),
        (
            "review",
            "admin",
            "/v1/packages/${package}/review",
            t("review"),
            200,
        ),
        ("atlas", "author", "/v1/atlases", t("atlas"), 201),
    ];
    for (name, key, path, body, status) in steps {
        let case =
            json!({"name": format!("control {name}"), "key": key, "path": path, "body": body});
        let got = exchange(addr, &request(ctx, &case)).await;
        assert_eq!(got.status, status, "control `{name}`: {}", got.text());
    }
    // PUT /v1/atlases and the bundle: accepted in form (the import of a non-empty store is
    // refused for that reason only).
    let case = json!({"name": "control atlases", "method": "PUT", "key": "admin", "path": "/v1/atlases", "body": t("atlases")});
    let got = exchange(addr, &request(ctx, &case)).await;
    assert_eq!(got.status, 200, "control `atlases`: {}", got.text());
    let files = cra_relay::export::unbundle(&ctx.bundle).unwrap();
    cra_relay::export::parse(&files).unwrap();
}

#[tokio::test]
async fn hostile_requests_are_refused_with_their_token_and_change_nothing() {
    let (s, ctx) = setup().await;
    let addr = s.server.as_ref().unwrap().addr;
    let cases = load_cases();
    assert!(cases.len() >= 60, "the table has {} cases", cases.len());
    let mut names = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for (file, case) in &cases {
        let name = case["name"].as_str().unwrap();
        assert!(names.insert(name.to_owned()), "case `{name}` twice");
        let raw = request(&ctx, case);
        let before = records(&s);
        // A bound, not a wait: a case that makes the server hang fails.
        let got = match tokio::time::timeout(Duration::from_secs(30), exchange(addr, &raw)).await {
            Ok(a) => a,
            Err(_) => {
                failures.push(format!("{file}: `{name}`: no answer in 30 s (a hang)"));
                continue;
            }
        };
        if let Err(why) = check(case, &got) {
            failures.push(format!("{file}: `{name}`: {why}"));
        }
        if records(&s) != before {
            failures.push(format!("{file}: `{name}`: the stores changed"));
        }
    }
    // Still serving after all of it.
    assert_eq!(s.get(None, "/v1/health").await.0, 200);
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    controls(&s, &ctx).await;
    s.stop().await;
}

/// A maintainer's session and a resolution of `repo-read` in it.
async fn maintainer_resolution(s: &TestServer) -> (String, String) {
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let resolve = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read"]);
    let (status, res) = s.post(Some(MAINT), "/v1/resolve", &resolve).await;
    assert_eq!(status, 200, "{res}");
    (sid, res["resolution_id"].as_str().unwrap().to_owned())
}

/// An executor at `/exec` whose first answer is `200 {"ok": 1e400}` and whose later answers are
/// `500 {"err": [-1e400]}`, written as raw text (no JSON library would write them).
async fn executor_beyond_a_double() -> String {
    use axum::http::{StatusCode, header::CONTENT_TYPE};
    use axum::routing::post;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let app = axum::Router::new().route(
        "/exec",
        post(move || {
            let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            async move {
                let (status, body) = if first {
                    (StatusCode::OK, r#"{"ok": 1e400}"#)
                } else {
                    (StatusCode::INTERNAL_SERVER_ERROR, r#"{"err": [-1e400]}"#)
                };
                (status, [(CONTENT_TYPE, "application/json")], body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/exec")
}

/// Issue 29, item 4: on `fda2190` an executor's `1e400` was recorded, hashed as `Infinity`,
/// and the chain could no longer be exported as JSON or verified.
#[tokio::test]
async fn an_executor_answering_a_number_beyond_a_double_is_an_invalid_outcome_and_the_chain_verifies()
 {
    let url = executor_beyond_a_double().await;
    let s = TestServer::start_with(move |c| {
        c.executors.insert(
            "github".into(),
            cra_runtime::config::ExecutorConfig::http(url, 5_000),
        );
    })
    .await;
    let (sid, resolution) = maintainer_resolution(&s).await;
    let resolution = resolution.as_str();
    for (what, status_word) in [("result", "error"), ("error details", "error")] {
        let params = json!({"owner": "octo", "repo": "hello"});
        let execute = execute_request(
            "maintainer-bot",
            &sid,
            &rid(),
            resolution,
            "repo.get",
            params,
        );
        let (status, answer) = s.post(Some(MAINT), "/v1/execute", &execute).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["status"], status_word, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(what) && message.contains("double"),
            "says why: {answer}"
        );
        if what == "result" {
            assert_eq!(answer["error"]["code"], "invalid_outcome", "{answer}");
        }
    }
    let exported = s.export_ndjson(&sid).await;
    let text = String::from_utf8(exported.clone()).unwrap();
    assert!(
        !text.contains("Infinity") && !text.contains("e+400") && !text.contains("e400"),
        "{text}"
    );
    let verified = appendix_b_verify(&exported);
    assert_eq!(verified["valid"], true, "{verified}");
    s.stop().await;
}

/// Issue 29, item 4: cra accepts and records integers of any length; Python 3.11 refuses to
/// read one of over 4,300 digits unless told otherwise, and `tools/appendix_b.py` must read
/// every chain cra accepts.
#[tokio::test]
async fn a_chain_holding_a_5000_digit_integer_verifies_with_appendix_b() {
    let (s, _calls) = start_with_executor().await;
    let (sid, resolution) = maintainer_resolution(&s).await;
    let resolution = resolution.as_str();
    let digits = format!(
        "{{\"owner\":\"octo\",\"repo\":\"hello\",\"n\":{}}}",
        "7".repeat(5000)
    );
    let params: Value = serde_json::from_str(&digits).unwrap();
    let execute = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        resolution,
        "repo.get",
        params,
    );
    // Refused for its schema (no `n` in repo.get's parameters), and recorded with them.
    let (status, refused) = s.post(Some(MAINT), "/v1/execute", &execute).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_parameters", "{refused}");
    let exported = s.export_ndjson(&sid).await;
    assert!(String::from_utf8_lossy(&exported).contains(&"7".repeat(5000)));
    let verified = appendix_b_verify(&exported);
    assert_eq!(verified["valid"], true, "{verified}");
    s.stop().await;
}

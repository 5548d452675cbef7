//! Writes the seed corpus of every target into `fuzz/seeds/<target>/` from the repository's
//! fixtures (atlases, trace chains, Relay vectors) plus a few hand-written near-valid inputs.
//! Run from `fuzz/`: `cargo run --example make_seeds` (stable toolchain, no sanitizer).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cra_fuzz::relay::{PROJECT, join_files};
use cra_relay::export::render;
use cra_relay::session::SeededCallsigns;
use cra_relay::store::RelayStore;
use cra_relay::store::memory::MemoryStore;
use cra_relay::{Actor, ActorType, Relay};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Value, json};

fn root() -> PathBuf {
    cra_fuzz::repo_root()
}

fn seeds(target: &str) -> PathBuf {
    let d = root().join("fuzz/seeds").join(target);
    fs::create_dir_all(&d).unwrap();
    d
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    fs::write(seeds(target).join(name), bytes).unwrap();
}

fn read(rel: &str) -> Vec<u8> {
    fs::read(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn json_seeds() {
    let vectors: Value = serde_json::from_slice(&read(
        "crates/cra-wire/tests/fixtures/relay-content-hash.json",
    ))
    .unwrap();
    let mut texts: Vec<(String, String)> = Vec::new();
    for v in vectors["canonical_vectors"].as_array().unwrap() {
        texts.push((v["id"].as_str().unwrap().to_owned(), v["input"].to_string()));
    }
    for (name, t) in [
        (
            "numbers",
            r#"[0,-0,1.0,1E5,1.50,1e16,1e-7,5e-324,1e400,-1e400,123456789012345678901234567890,0.1,925957820813.90625]"#,
        ),
        (
            "strings",
            r#"{"é":"\u00e9\ud83d\ude00","\u007f":"\b\f\n\r\t\"\\/","":null,"a":[true,false,null]}"#,
        ),
        (
            "unsorted",
            r#"{"b":{"z":1,"y":[{"d":1,"c":2}]},"a":0,"😀":1,"￿":2}"#,
        ),
        ("nested", "[[[[[[[[[[{\"a\":[[[[]]]]}]]]]]]]]]]"),
        ("duplicate", r#"{"a":1,"b":{"k":1,"k":2}}"#),
        ("spaced", " {\r\n\t\"k\" : [ 1 , 2.5e+3 ] } "),
        ("escaped-key", r#"{"a":1,"\u0061b":2,"a\/b":3}"#),
    ] {
        texts.push((name.to_owned(), t.to_owned()));
    }
    for target in ["strict_json", "canonical_trace", "canonical_relay"] {
        for (name, t) in &texts {
            write(target, name, t.as_bytes());
        }
    }
}

fn carp_seeds() {
    let resolve = |caps: &[&str], atlas: &str, op: &str| {
        json!({
            "carp_version": "1.0",
            "request_id": "0190a000-0000-7000-8000-000000000001",
            "timestamp": "$NOW",
            "operation": op,
            "requester": {"agent_id": "$AGENT", "session_id": "$SESSION"},
            "task": {"goal": "open a pull request fixing the CI workflow", "risk_tier": "medium",
                     "required_capabilities": caps, "context_hints": ["ci", "workflow"]},
            "atlas_ids": [atlas],
            "context": {"repo": "octo/hello", "branch": "main"}
        })
    };
    let seeds_of = [
        (
            "resolve-read",
            resolve(&["repo-read"], "dev.cra.github-ops", "resolve"),
        ),
        (
            "resolve-all",
            resolve(
                &["repo-read", "contribute", "maintain"],
                "dev.cra.github-ops",
                "resolve",
            ),
        ),
        (
            "validate",
            resolve(&["contribute"], "dev.cra.github-ops", "validate"),
        ),
        ("payments", resolve(&[], "com.example.payments", "resolve")),
        (
            "support",
            resolve(&[], "com.example.customer-support", "resolve"),
        ),
    ];
    for (name, v) in &seeds_of {
        write("carp_request", name, v.to_string().as_bytes());
    }
    let exec = |action: &str, params: Value, key: Option<&str>| {
        let mut e =
            json!({"resolution_id": "$RESOLUTION", "action_id": action, "parameters": params});
        if let Some(k) = key {
            e["idempotency_key"] = json!(k);
        }
        json!({
            "carp_version": "1.0",
            "request_id": "0190a000-0000-7000-8000-000000000002",
            "timestamp": "$NOW",
            "operation": "execute",
            "requester": {"agent_id": "$AGENT", "session_id": "$SESSION"},
            "execution": e
        })
    };
    let execs = [
        (
            "repo-get",
            exec("repo.get", json!({"owner": "octo", "repo": "hello"}), None),
        ),
        (
            "repo-get-bad",
            exec("repo.get", json!({"owner": "octo/../x", "repo": 7}), None),
        ),
        (
            "pr-merge",
            exec(
                "pr.merge",
                json!({"owner": "octo", "repo": "hello", "number": 42}),
                Some("k1"),
            ),
        ),
        (
            "branch-create",
            exec(
                "branch.create",
                json!({"owner": "octo", "repo": "hello", "branch": "agent/fix-ci", "from": "main"}),
                None,
            ),
        ),
        ("forcepush", exec("branch.forcepush", json!({}), None)),
    ];
    for (name, v) in &execs {
        write("carp_execute", name, v.to_string().as_bytes());
        let literal = v
            .to_string()
            .replace("$RESOLUTION", "0190a000-0000-7000-8000-0000000000aa");
        write("carp_request", &format!("exec-{name}"), literal.as_bytes());
    }
}

fn trace_seeds() {
    for (name, rel) in [
        ("session", "examples/session.trace.jsonl"),
        (
            "appendix-b",
            "crates/cra-trace/tests/fixtures/trace-chain-appendix-b.jsonl",
        ),
        (
            "weekend-merge",
            "atlases/dev.cra.github-ops/tests/maintainer-weekend-merge.trace.jsonl",
        ),
    ] {
        let mut bytes = vec![7u8];
        bytes.extend(read(rel));
        write("trace_jsonl", name, &bytes);
        // The same chain with its first line broken, and read in one-byte chunks.
        let mut broken = vec![0u8];
        let text = read(rel);
        let cut = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
        broken.extend_from_slice(&text[..cut / 2]);
        broken.extend_from_slice(&text[cut..]);
        write("trace_jsonl", &format!("{name}-broken"), &broken);
    }
}

fn atlas_seeds() {
    let minimal = root().join("crates/cra-atlas/tests/fixtures/minimal");
    for (i, rel) in [
        "atlas.json",
        "policies/deny.json",
        "actions/notes.json",
        "context/overview.md",
    ]
    .iter()
    .enumerate()
    {
        let mut b = vec![i as u8];
        b.extend(fs::read(minimal.join(rel)).unwrap());
        write("atlas_manifest", &format!("minimal-{i}"), &b);
    }
    let gh = root().join("atlases/dev.cra.github-ops");
    for (sel, rel) in [
        (0u8, "atlas.json"),
        (1, "policies/guardrails.json"),
        (1, "policies/limits.json"),
        (1, "policies/approvals.json"),
        (2, "actions/maintain.json"),
    ] {
        let mut b = vec![sel];
        b.extend(fs::read(gh.join(rel)).unwrap());
        write(
            "atlas_manifest",
            &format!("github-{}", rel.replace('/', "-")),
            &b,
        );
    }
    let mut extra = vec![4u8];
    extra.extend_from_slice(
        b"policies/extra.json\n[{\"policy_id\":\"p\",\"type\":\"deny\",\"actions\":[\"note.**\"]}]",
    );
    write("atlas_manifest", "extra-file", &extra);

    let files: BTreeMap<String, Vec<u8>> =
        cra_atlas::load::read_dir_files(&minimal, cra_atlas::load::Limits::default()).unwrap();
    let gz = cra_atlas::pack::pack_files(&files).unwrap();
    let mut b = vec![0u8];
    b.extend(&gz);
    write("atlas_archive", "minimal-gz", &b);
    let mut tar_bytes = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice()).read_to_end_compat(&mut tar_bytes);
    let mut b = vec![1u8];
    b.extend(&tar_bytes);
    write("atlas_archive", "minimal-tar", &b);
}

trait ReadAll {
    fn read_to_end_compat(self, out: &mut Vec<u8>);
}

impl<R: std::io::Read> ReadAll for R {
    fn read_to_end_compat(mut self, out: &mut Vec<u8>) {
        self.read_to_end(out).unwrap();
    }
}

fn relay_seeds() {
    let vectors: Value =
        serde_json::from_slice(&read("crates/cra-relay/tests/fixtures/hash-vectors.json")).unwrap();
    let mut packages = Vec::new();
    for v in vectors["vectors"].as_array().unwrap() {
        let mut p = v["package"].clone();
        p["project_id"] = json!(PROJECT);
        let id = v["id"].as_str().unwrap().to_owned();
        write("relay_package", &id, p.to_string().as_bytes());
        packages.push(p);
    }
    for (name, body) in [
        (
            "plain",
            json!({"subject": "service:api", "predicate": "owner", "value": "team-a"}),
        ),
        (
            "full",
            json!({"subject": "service:api", "predicate": "deploys_to", "value": "eu-west-1",
                   "valid_from": "2026-03-01T00:00:00Z", "confidence": 0.9, "tags": ["infra"],
                   "x-note": {"k": [1, 2]}}),
        ),
        (
            "future",
            json!({"subject": "s", "predicate": "p", "value": "v", "valid_from": "2026-04-01T00:00:00+02:00"}),
        ),
    ] {
        write("relay_fact", name, body.to_string().as_bytes());
    }

    let clock = Arc::new(FixedClock::parse("2026-03-02T10:00:00Z").unwrap());
    let store: Arc<dyn RelayStore> = Arc::new(MemoryStore::new());
    let r = Relay::new(
        store.clone(),
        clock,
        Arc::new(SequentialIds::new(1_772_445_600_000, 3)),
        Arc::new(SeededCallsigns::new(1)),
    );
    r.create_project(PROJECT, "Fuzz project").unwrap();
    let jordan = Actor::new("jordan", ActorType::Human);
    let s = r.start_session(PROJECT, &jordan).unwrap();
    for p in packages.iter().take(3) {
        let _ = r.deposit(PROJECT, &jordan, p);
    }
    let agent = Actor::new("fuzz-agent", ActorType::Agent);
    r.assert_fact(
        PROJECT,
        &agent,
        &json!({"subject": "s", "predicate": "p", "value": "1"}),
    )
    .unwrap();
    r.assert_fact(
        PROJECT,
        &agent,
        &json!({"subject": "s", "predicate": "p", "value": "2"}),
    )
    .unwrap();
    let first = store.snapshot().unwrap();
    if let Some(p) = first.packages.first() {
        let id = p.package.package_id().to_owned();
        let _ = r.flag_for_review(&id, "human", Some("please check"), &jordan);
        let _ = r.review(&id, "complete", Some("fine"), &jordan);
    }
    let _ = r.end_session(&s.session_id, &jordan);
    let files = render(&store.snapshot().unwrap()).unwrap();
    let joined = join_files(&files);
    let mut b = vec![0u8];
    b.extend(&joined);
    write("relay_import", "export", &b);
    let mut b = vec![1u8];
    b.extend(&joined);
    write("relay_import", "export-rehash", &b);
}

fn main() {
    let dir = root().join("fuzz/seeds");
    if Path::new(&dir).exists() {
        fs::remove_dir_all(&dir).unwrap();
    }
    json_seeds();
    carp_seeds();
    trace_seeds();
    atlas_seeds();
    relay_seeds();
    for e in fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        println!(
            "{}: {} seeds",
            e.file_name().to_string_lossy(),
            fs::read_dir(e.path()).unwrap().count()
        );
    }
}

//! `cra atlas ...`: the broken-atlas table, the example atlases, init, fmt, adapters, pack.
//!
//! These tests run the real `cra` binary so that exit codes and output streams are exactly what
//! an author sees.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn cra(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cra"))
        .args(args)
        .output()
        .expect("the cra binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/atlas")
}

fn examples() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../atlases");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("atlas.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

/// A writable copy of the valid base fixture.
fn base_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("base");
    copy_dir(&fixtures().join("valid/base"), &dir);
    (tmp, dir)
}

#[test]
fn broken_atlases_report_exit_code_file_pointer_and_line() {
    let table: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("broken.json")).unwrap())
            .unwrap();
    assert!(table.len() >= 40, "only {} broken atlases", table.len());
    let fixtures_dir = fixtures();
    let mut failures = Vec::new();
    for (name, want) in &table {
        let dir = fixtures_dir.join("broken").join(name);
        assert!(dir.is_dir(), "fixture {name} is missing");
        let extra: Vec<String> = want
            .get("args")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().unwrap().replace("{fixtures}", s(&fixtures_dir)))
                    .collect()
            })
            .unwrap_or_default();
        let mut args = vec!["atlas", "check", "-o", "json"];
        args.extend(extra.iter().map(String::as_str));
        args.push(s(&dir));
        let (code, stdout, _) = cra(&args);
        let doc: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{name}: stdout is not JSON ({e}): {stdout}"));
        let diags = doc["atlases"][0]["diagnostics"].as_array().unwrap();
        let (wcode, wfile, wptr) = (
            want["code"].as_str().unwrap(),
            want["file"].as_str().unwrap(),
            want["pointer"].as_str().unwrap(),
        );
        let hit = diags
            .iter()
            .find(|d| d["code"] == wcode && d["file"] == wfile && d["pointer"] == wptr);
        if i64::from(code) != want["exit"].as_i64().unwrap() || hit.is_none() {
            failures.push(format!(
                "{name}: exit {code}, diagnostics {diags:#?}, wanted {want}"
            ));
            continue;
        }
        // A line is given exactly when the named file is JSON text present in the atlas.
        let file_exists = dir.join(wfile).is_file();
        let hit = hit.unwrap();
        assert_eq!(
            hit.get("line").is_some_and(Value::is_u64),
            file_exists && wfile.ends_with(".json"),
            "{name}: line of {hit}"
        );
        let message = hit["message"].as_str().unwrap();
        assert!(!message.is_empty());
        if let Some(part) = want.get("message_contains").and_then(Value::as_str) {
            assert!(message.contains(part), "{name}: `{message}` lacks `{part}`");
        }
        // Text mode names the same file and pointer on standard error, and prints nothing else.
        let mut text_args = vec!["atlas", "check"];
        text_args.extend(extra.iter().map(String::as_str));
        text_args.push(s(&dir));
        let (tcode, tout, terr) = cra(&text_args);
        assert_eq!(tcode, code, "{name}: text mode exit");
        assert_eq!(tout, "", "{name}: text mode stdout");
        let shown = if wptr.is_empty() { "(document)" } else { wptr };
        assert!(
            terr.lines()
                .any(|l| l.contains(wfile) && l.contains(shown) && l.contains(wcode)),
            "{name}: stderr lacks {wfile} {shown}: {terr}"
        );
        // ... and under it the source line the diagnostic is about, numbered, drawn by miette
        // (no colour: standard error is not a terminal).
        if let Some(line) = hit.get("line").and_then(Value::as_u64) {
            let text = std::fs::read_to_string(dir.join(wfile)).unwrap();
            let source = text
                .lines()
                .nth(usize::try_from(line).unwrap() - 1)
                .unwrap();
            let shown = format!("{line} │ {source}");
            assert!(
                terr.lines().any(|l| l.trim() == shown.trim()),
                "{name}: stderr lacks the source line `{shown}`: {terr}"
            );
        }
        // SARIF names the same rule, file and line.
        let mut sarif_args = vec!["atlas", "check", "-o", "sarif"];
        sarif_args.extend(extra.iter().map(String::as_str));
        sarif_args.push(s(&dir));
        let (scode, sout, _) = cra(&sarif_args);
        assert_eq!(scode, code, "{name}: sarif mode exit");
        let sarif: Value = serde_json::from_str(&sout).unwrap();
        let results = sarif["runs"][0]["results"].as_array().unwrap();
        assert_eq!(
            results.len(),
            diags.len(),
            "{name}: a result per diagnostic"
        );
        let uri = format!("{}/{wfile}", s(&dir));
        let found = results.iter().find(|r| {
            let location = &r["locations"][0];
            let pointer = &location["logicalLocations"][0]["fullyQualifiedName"];
            r["ruleId"] == wcode
                && location["physicalLocation"]["artifactLocation"]["uri"]
                    .as_str()
                    .is_some_and(|u| u == format!("file://{uri}") || wfile.is_empty())
                && (pointer == wptr || (wptr.is_empty() && pointer.is_null()))
        });
        let found = found.unwrap_or_else(|| panic!("{name}: no SARIF result for {uri}: {sout}"));
        assert_eq!(
            found["locations"][0]["physicalLocation"]["region"]["startLine"],
            hit.get("line").cloned().unwrap_or(Value::Null),
            "{name}: {found}"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The SARIF document as code-review tools require it (SARIF 2.1.0, the properties GitHub code
/// scanning reads): version, the tool's name and rules, each result's rule (by id and index
/// into the rules), level, message and a relative location with its line; the rules are the
/// codes that occur, each once.
#[test]
fn sarif_output_is_what_code_review_tools_read() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    copy_dir(
        &fixtures().join("broken/policy-pattern-matches-nothing"),
        &root.join("atlases/warned"),
    );
    copy_dir(
        &fixtures().join("broken").join(first_broken_with_a_line()),
        &root.join("atlases/broken"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cra"))
        .args([
            "atlas",
            "check",
            "-o",
            "sarif",
            "./atlases/warned",
            "atlases/broken",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["version"], "2.1.0");
    assert!(
        doc["$schema"]
            .as_str()
            .unwrap()
            .ends_with("sarif-2.1.0.json")
    );
    let run = &doc["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "cra");
    assert_eq!(run["invocations"][0]["executionSuccessful"], true);
    let rules: Vec<&str> = run["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let mut unique = rules.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), rules.len(), "each rule once: {rules:?}");
    let results = run["results"].as_array().unwrap();
    assert!(results.iter().any(|r| r["level"] == "warning"));
    assert!(results.iter().any(|r| r["level"] == "error"));
    for r in results {
        let index = usize::try_from(r["ruleIndex"].as_u64().unwrap()).unwrap();
        assert_eq!(rules[index], r["ruleId"], "{r}");
        assert!(!r["message"]["text"].as_str().unwrap().is_empty());
        let place = &r["locations"][0]["physicalLocation"];
        let uri = place["artifactLocation"]["uri"].as_str().unwrap();
        assert!(
            uri.starts_with("atlases/"),
            "relative to where cra ran, no ./: {uri}"
        );
        assert!(root.join(uri).is_file() || root.join(uri).is_dir(), "{uri}");
        if let Some(line) = place["region"]["startLine"].as_u64() {
            let text = std::fs::read_to_string(root.join(uri)).unwrap();
            assert!(
                usize::try_from(line).unwrap() <= text.lines().count(),
                "{r}"
            );
        }
    }
    assert!(
        results
            .iter()
            .any(|r| r["locations"][0]["physicalLocation"]["region"]["startLine"].is_u64()),
        "some result has a line"
    );
}

/// The name of the first broken fixture whose expected diagnostic has a line (a JSON file
/// that exists).
fn first_broken_with_a_line() -> String {
    let table: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("broken.json")).unwrap())
            .unwrap();
    table
        .iter()
        .find(|(name, want)| {
            let file = want["file"].as_str().unwrap();
            want.get("args").is_none()
                && file.ends_with(".json")
                && fixtures().join("broken").join(name).join(file).is_file()
        })
        .map(|(name, _)| name.clone())
        .unwrap()
}

#[test]
fn warnings_fail_only_under_strict() {
    let dir = fixtures().join("broken/policy-pattern-matches-nothing");
    let (code, out, err) = cra(&["atlas", "check", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "");
    assert!(err.contains("warning[pattern_matches_nothing]"), "{err}");
    let (code, _, err) = cra(&["atlas", "check", "--strict", s(&dir)]);
    assert_eq!(code, 3);
    assert!(err.contains("error[pattern_matches_nothing]"), "{err}");
}

#[test]
fn example_atlases_pass_strict_check_fmt_and_adapters_checks() {
    let dirs = examples();
    assert!(dirs.len() >= 3, "{dirs:?}");
    for dir in &dirs {
        for args in [
            vec!["atlas", "check", "--strict", s(dir)],
            vec!["atlas", "fmt", "--check", s(dir)],
            vec!["atlas", "adapters", "--check", s(dir)],
        ] {
            let (code, out, err) = cra(&args);
            assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""), "{args:?}");
        }
    }
    // Together as well (one registry, no id/version clash).
    let mut args = vec!["atlas", "check", "--strict"];
    args.extend(dirs.iter().map(|d| s(d)));
    assert_eq!(cra(&args).0, 0);
}

#[test]
fn golden_peer_atlas_loads_and_reports_its_missing_context_file() {
    let dir = fixtures().join("golden-simple");
    let (code, out, _) = cra(&["atlas", "check", "-o", "json", s(&dir)]);
    assert_eq!(code, 3);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let diags = doc["atlases"][0]["diagnostics"].as_array().unwrap();
    let errors: Vec<&Value> = diags.iter().filter(|d| d["severity"] == "error").collect();
    assert_eq!(errors.len(), 1, "{diags:#?}");
    assert_eq!(errors[0]["code"], "missing_file");
    assert_eq!(errors[0]["pointer"], "/context_packs/0/files/0");
    assert_eq!(errors[0]["line"], 26);
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("context/overview.md")
    );
}

#[test]
fn init_writes_a_skeleton_that_passes_strict_check() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("new");
    let (code, _, err) = cra(&["atlas", "init", s(&dir), "--id", "com.example.new-atlas"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        cra(&["atlas", "check", "--strict", s(&dir)]),
        (0, String::new(), String::new())
    );
    assert_eq!(cra(&["atlas", "fmt", "--check", s(&dir)]).0, 0);
    // Not over an existing atlas, and not with a bad id.
    assert_eq!(
        cra(&["atlas", "init", s(&dir), "--id", "com.example.x"]).0,
        1
    );
    let other = tmp.path().join("other");
    let (code, _, err) = cra(&["atlas", "init", s(&other), "--id", "Example"]);
    assert_eq!(code, 1);
    assert!(err.contains("not an atlas id"), "{err}");
}

#[test]
fn fmt_check_reports_then_fmt_fixes_without_changing_values() {
    let (_tmp, dir) = base_copy();
    let before: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("atlas.json")).unwrap()).unwrap();
    let (code, _, err) = cra(&["atlas", "fmt", "--check", s(&dir)]);
    assert_eq!(code, 2);
    assert!(err.contains("atlas.json: not in canonical form"), "{err}");
    assert_eq!(cra(&["atlas", "fmt", s(&dir)]).0, 0);
    assert_eq!(
        cra(&["atlas", "fmt", "--check", s(&dir)]),
        (0, String::new(), String::new())
    );
    let after_text = std::fs::read_to_string(dir.join("atlas.json")).unwrap();
    let after: Value = serde_json::from_str(&after_text).unwrap();
    assert_eq!(before, after);
    assert!(after_text.starts_with("{\n  \"atlas_version\": \"1.0\",\n  \"atlas_id\": "));
    assert_eq!(cra(&["atlas", "check", "--strict", s(&dir)]).0, 0);
    // Formatting a file that is not JSON reports it as an invalid atlas.
    std::fs::write(dir.join("policies/deny.json"), "[{").unwrap();
    assert_eq!(cra(&["atlas", "fmt", "--check", s(&dir)]).0, 3);
}

#[test]
fn adapters_check_fails_on_a_stale_or_missing_file() {
    let (_tmp, dir) = base_copy();
    assert_eq!(
        cra(&["atlas", "adapters", "--check", s(&dir)]).0,
        2,
        "missing files"
    );
    let (code, out, _) = cra(&["atlas", "adapters", s(&dir)]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 4, "{out}");
    assert_eq!(cra(&["atlas", "adapters", "--check", s(&dir)]).0, 0);
    // Change an action: every adapter is now stale.
    let path = dir.join("actions/notes.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("List notes", "List all notes");
    std::fs::write(&path, text).unwrap();
    let (code, _, err) = cra(&["atlas", "adapters", "--check", s(&dir)]);
    assert_eq!(code, 2);
    assert!(err.contains("adapters/mcp.json: stale"), "{err}");
    let (code, _, err) = cra(&["atlas", "check", "--strict", s(&dir)]);
    assert_eq!(code, 3);
    assert!(err.contains("stale_adapter"), "{err}");
    // One target only.
    assert_eq!(
        cra(&["atlas", "adapters", "--target", "anthropic", s(&dir)]).0,
        0
    );
    assert_eq!(
        cra(&[
            "atlas",
            "adapters",
            "--check",
            "--target",
            "anthropic",
            s(&dir)
        ])
        .0,
        0
    );
    assert_eq!(cra(&["atlas", "adapters", "--check", s(&dir)]).0, 2);
    assert_eq!(
        cra(&["atlas", "adapters", "--target", "gemini", s(&dir)]).0,
        2,
        "clap usage error"
    );
}

#[test]
fn pack_is_deterministic_and_archive_and_directory_share_the_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixtures().join("valid/base");
    let a = tmp.path().join("a.atlas.tar.gz");
    let b = tmp.path().join("b.atlas.tar.gz");
    let (code, out_a, err) = cra(&["atlas", "pack", s(&dir), "--out", s(&a)]);
    assert_eq!(code, 0, "{err}");
    let (_, out_b, _) = cra(&["atlas", "pack", s(&dir), "--out", s(&b)]);
    let bytes = std::fs::read(&a).unwrap();
    assert_eq!(bytes, std::fs::read(&b).unwrap());
    let sha = cra_wire::hash::sha256_hex(&bytes);
    assert_eq!(out_a.lines().next().unwrap(), format!("{sha}  {}", s(&a)));
    let printed_digest = out_a
        .lines()
        .nth(1)
        .unwrap()
        .strip_prefix("atlas digest ")
        .unwrap();
    assert_eq!(out_b.lines().nth(1), out_a.lines().nth(1));

    let digest_of = |p: &Path| {
        let (code, out, err) = cra(&["atlas", "inspect", "-o", "json", s(p)]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["digest"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(digest_of(&dir), printed_digest);
    assert_eq!(digest_of(&a), printed_digest);
    assert_eq!(cra(&["atlas", "check", "--strict", s(&a)]).0, 0);
    let (_, text, _) = cra(&["atlas", "inspect", s(&a)]);
    assert!(
        text.contains(&format!("digest        {printed_digest}")),
        "{text}"
    );
}

#[test]
fn inspect_lists_policies_in_evaluation_order() {
    let dir = examples()
        .into_iter()
        .find(|d| d.ends_with("dev.cra.github-ops"))
        .unwrap();
    let (code, out, err) = cra(&["atlas", "inspect", "-o", "json", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let order = ["deny", "require_approval", "rate_limit", "budget", "allow"];
    let ranks: Vec<usize> = doc["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| order.iter().position(|t| p["type"] == *t).unwrap())
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{ranks:?}");
    assert_eq!(doc["policies"][0]["policy_id"], "deny-force-push");
    assert_eq!(
        doc["actions_by_risk_tier"]["critical"][0],
        "branch.forcepush"
    );
}

#[test]
fn unreadable_inputs_exit_1_and_corrupt_archives_exit_3() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let (code, _, err) = cra(&["atlas", "check", s(&missing)]);
    assert_eq!(code, 1);
    assert!(err.contains("could not read"), "{err}");
    let file = tmp.path().join("atlas.txt");
    std::fs::write(&file, "x").unwrap();
    assert_eq!(cra(&["atlas", "check", s(&file)]).0, 1);
    let junk = tmp.path().join("junk.atlas.tar.gz");
    std::fs::write(&junk, "not gzip").unwrap();
    let (code, _, err) = cra(&["atlas", "check", s(&junk)]);
    assert_eq!(code, 3);
    assert!(err.contains("bad_archive"), "{err}");
}

#[test]
fn atlases_checked_together_resolve_each_others_dependencies() {
    let (tmp, base) = base_copy();
    let user = tmp.path().join("user");
    copy_dir(&base, &user);
    let manifest = user.join("atlas.json");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "\"atlas_id\": \"com.example.base\",",
        "\"atlas_id\": \"com.example.user\",\n  \"dependencies\": {\"com.example.base\": \">=1.0, <2\"},",
    );
    std::fs::write(&manifest, text).unwrap();
    let (code, _, err) = cra(&["atlas", "check", s(&user)]);
    assert_eq!(code, 3);
    assert!(
        err.contains("dependency_missing") && err.contains("com.example.base"),
        "{err}"
    );
    assert_eq!(
        cra(&["atlas", "check", "--strict", s(&user), s(&base)]).0,
        0
    );
    assert_eq!(
        cra(&["atlas", "check", "--strict", "--with", s(&base), s(&user)]).0,
        0
    );
    // Two different atlases with one id and version are refused.
    std::fs::write(base.join("context/overview.md"), "# Changed\n").unwrap();
    let other = tmp.path().join("other");
    copy_dir(&fixtures().join("valid/base"), &other);
    let (code, _, err) = cra(&["atlas", "check", s(&base), s(&other)]);
    assert_eq!(code, 3);
    assert!(err.contains("duplicate_atlas"), "{err}");
}

/// `cra resolve --record` of a `validate` request (issue 22, B.10): a dry run records the
/// request and one completion marked `dry_run`, nothing else, and the chain verifies.
#[test]
fn resolve_records_a_validate_request_as_a_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("validate.json");
    let record = dir.path().join("validate.trace.jsonl");
    let body = serde_json::json!({
        "carp_version": "1.0", "request_id": "0190f5d2-8a4e-7b3c-9d1e-a00000000001",
        "timestamp": "2026-01-15T10:00:00.000000Z", "operation": "validate",
        "requester": {"agent_id": "maintainer-bot", "session_id": "0190f5d2-8a4e-7b3c-9d1e-5e5510000001"},
        "task": {"goal": "merge pull request 42", "required_capabilities": ["maintain"]}
    });
    std::fs::write(&request, body.to_string()).unwrap();
    let atlas = examples()
        .into_iter()
        .find(|p| p.ends_with("dev.cra.github-ops"))
        .unwrap();
    let (code, out, err) = cra(&[
        "resolve",
        "--atlas",
        s(&atlas),
        "--request",
        s(&request),
        "--record",
        s(&record),
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    let text = std::fs::read_to_string(&record).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "session.started",
            "carp.request.received",
            "carp.resolution.completed"
        ]
    );
    assert_eq!(
        events[0]["payload"],
        serde_json::json!({"agent_id": "maintainer-bot", "goal": "merge pull request 42",
            "project_id": null, "parent_session_id": null}),
        "session.started has the spec's agent_id and goal"
    );
    assert_eq!(events[1]["payload"]["operation"], "validate");
    assert_eq!(events[2]["payload"]["dry_run"], true);
    assert_eq!(
        events[2]["payload"]["resolution"]["resolution_id"],
        answer["resolution_id"]
    );
    let (code, _, err) = cra(&["trace", "verify", s(&record)]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_log_only_approval_grants_nothing_so_it_is_not_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("atlas");
    copy_dir(&fixtures().join("broken/approval-grants-alone"), &dir);
    let approvals = dir.join("policies/approvals.json");
    let mut policies: Value =
        serde_json::from_str(&std::fs::read_to_string(&approvals).unwrap()).unwrap();
    policies[0]["enforcement"] = "log_only".into();
    std::fs::write(&approvals, policies.to_string()).unwrap();
    let (code, _, err) = cra(&["atlas", "check", "--strict", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("approval_grants_alone"), "{err}");
}

/// `cra atlas sign` and `cra atlas verify` as an author runs them: help, `-o json`, and the exit
/// codes (0 valid, 2 not valid); the key is one `ssh-keygen` made.
#[test]
fn sign_and_verify_through_the_binary() {
    for cmd in ["sign", "verify"] {
        let (code, out, _) = cra(&["atlas", cmd, "--help"]);
        assert_eq!(code, 0);
        assert!(out.contains("Usage: cra atlas"), "{out}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let atlas = tmp.path().join("atlas");
    let (code, _, err) = cra(&["atlas", "init", s(&atlas), "--id", "com.example.signed"]);
    assert_eq!(code, 0, "{err}");
    let key = tmp.path().join("key");
    let made = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "ci@example.com",
            "-f",
        ])
        .arg(&key)
        .status()
        .expect("ssh-keygen runs (OpenSSH client tools)");
    assert!(made.success());
    let (code, out, err) = cra(&["atlas", "sign", s(&atlas), "--key", s(&key), "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let signed: Value = serde_json::from_str(&out).unwrap();
    assert!(atlas.join(".atlas.sig").is_file());
    let public = key.with_extension("pub");
    let (code, out, err) = cra(&[
        "atlas",
        "verify",
        s(&atlas),
        "--trusted-key",
        s(&public),
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let verified: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(verified["digest"], signed["digest"]);
    assert_eq!(verified["principals"][0], "ci@example.com");

    // Packing keeps the digest, so the signature goes beside the archive and holds there.
    let archive = tmp.path().join("signed.atlas.tar.gz");
    let (code, out, err) = cra(&["atlas", "pack", s(&atlas), "--out", s(&archive)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("signature "), "{out}");
    let (code, _, err) = cra(&["atlas", "verify", s(&archive), "--trusted-key", s(&public)]);
    assert_eq!(code, 0, "{err}");

    std::fs::write(atlas.join("context/late.md"), "late\n").unwrap();
    let (code, out, _) = cra(&[
        "atlas",
        "verify",
        s(&atlas),
        "--trusted-key",
        s(&public),
        "-o",
        "json",
    ]);
    assert_eq!(code, 2, "{out}");
    let refused: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(refused["valid"], false);
}

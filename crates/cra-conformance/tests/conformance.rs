//! The conformance suite's own tests (one integration-test binary): the corpus is well formed and
//! large enough, the documents agree with the code, the whole suite runs in-process, and
//! deliberate mutations of the implementation make the named fixtures fail.

// Test helpers outside `#[test]` functions panic on a broken corpus, which is the point.
#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cra_conformance::target::inproc::{InProcess, Mutation};
use cra_conformance::{Filter, Fixture, Target, matcher, run, verbs};
use serde_json::Value;

fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance")
}

fn fixtures() -> Vec<Fixture> {
    cra_conformance::load_dir(&conformance_dir().join("fixtures"))
        .expect("the fixture corpus loads")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(conformance_dir().join(name)).expect("document readable")
}

/// A case whose expectation is a refusal or a negative verdict.
fn is_negative(f: &Fixture) -> bool {
    let e = f.expected.to_string();
    [
        "\"error\"",
        "\"valid\":false",
        "\"identical\":false",
        "\"hash_mismatch\"",
        "\"type\":\"deny\"",
        "\"denied_actions\":[{\"action_id\"",
    ]
    .iter()
    .any(|m| e.contains(m))
        || f.expected
            .get("status")
            .and_then(Value::as_u64)
            .is_some_and(|s| s >= 400)
}

#[test]
fn every_fixture_validates_against_the_schema() {
    let schema: Value = serde_json::from_str(&read("fixture.schema.json")).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let mut bad = Vec::new();
    for f in fixtures() {
        let raw: Value = serde_json::from_str(&std::fs::read_to_string(&f.path).expect("readable"))
            .expect("JSON");
        for e in validator.iter_errors(&raw) {
            bad.push(format!("{}: {} at {}", f.id, e, e.instance_path()));
        }
    }
    assert!(
        bad.is_empty(),
        "fixtures failing fixture.schema.json:\n{}",
        bad.join("\n")
    );
}

#[test]
fn corpus_covers_every_surface_with_positive_and_negative_cases() {
    let all = fixtures();
    assert!(all.len() >= 250, "only {} fixtures", all.len());
    for surface in verbs::SURFACES {
        let of: Vec<&Fixture> = all.iter().filter(|f| f.surface == *surface).collect();
        let neg = of.iter().filter(|f| is_negative(f)).count();
        assert!(neg > 0, "surface {surface} has no negative case");
        assert!(of.len() > neg, "surface {surface} has no positive case");
    }
    for level in verbs::CRA_LEVELS.iter().chain(verbs::RELAY_LEVELS) {
        assert!(
            all.iter().any(|f| f.level == *level),
            "no fixture at level {level}"
        );
    }
}

#[test]
fn loader_refuses_malformed_fixtures() {
    let dir = std::env::temp_dir().join(format!("cra-conf-bad-{}", std::process::id()));
    let sub = dir.join("cra").join("verify");
    std::fs::create_dir_all(&sub).expect("temp dir");
    let good = r#"{"id":"x1","suite":"cra","surface":"verify","level":"trace-core","description":"d",
        "spec_refs":["TRACE §4.4.2"],"setup":{},"input":{"operation":"verify_chain","args":{}},"expected":{}}"#;
    let cases = [
        (
            "x1",
            good.replace("verify_chain", "frobnicate"),
            "unknown operation",
        ),
        (
            "x1",
            good.replace("trace-core", "L2"),
            "not a level of suite",
        ),
        ("x2", good.to_owned(), "differs from the file name"),
        (
            "x1",
            good.replace(r#""setup":{}"#, r#""setup":{"clock":1}"#),
            "unknown setup key",
        ),
        (
            "x1",
            good.replace(r#""spec_refs":["TRACE §4.4.2"]"#, r#""spec_refs":[]"#),
            "spec_refs is empty",
        ),
        (
            "x1",
            good.replace(r#""level""#, r#""level":"x","level""#),
            "duplicate",
        ),
    ];
    for (name, text, want) in cases {
        let path = sub.join(format!("{name}.json"));
        std::fs::write(&path, text).expect("write");
        let err = cra_conformance::fixture::load_file(&path).expect_err("must be refused");
        assert!(
            err.to_string().contains(want),
            "{err} should mention {want}"
        );
        std::fs::remove_file(&path).expect("cleanup");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Cases our implementation fails today, each a finding reported to the owning area. The test
/// fails if anything else fails; a fixed case simply drops off this list.
const KNOWN_FAILURES: &[(&str, &str)] = &[];

#[test]
fn whole_suite_runs_in_process() {
    let all = fixtures();
    let report = run(&InProcess::new(), &all, &Filter::default());
    let text = report.render_text();
    println!("{text}");
    assert_eq!(report.cases.len(), all.len());
    let last = text.lines().last().expect("a last line");
    assert!(
        last.starts_with("results: ") && last.contains(" passed, ") && last.ends_with(" failed")
    );
    let t = report.totals();
    let known: BTreeSet<&str> = KNOWN_FAILURES.iter().map(|(id, _)| *id).collect();
    let unexpected: Vec<String> = report
        .failed_ids()
        .into_iter()
        .filter(|id| !known.contains(id.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "unexpected failures: {unexpected:?}\n{text}"
    );
    for (id, why) in KNOWN_FAILURES {
        if report.failed_ids().iter().any(|f| f == id) {
            println!("known failure {id}: {why}");
        }
    }
    assert_eq!(t.errored, 0, "some cases errored:\n{text}");
    assert_eq!(
        t.not_implemented, 0,
        "in-process offers every verb:\n{text}"
    );
    assert_eq!(report.exit_code(), 0, "every claim holds:\n{text}");
    let json = report.to_json();
    assert_eq!(json["totals"]["passed"].as_u64(), Some(t.passed as u64));
}

#[test]
fn report_counts_not_implemented_apart_and_never_as_a_pass_of_a_claim() {
    let all: Vec<Fixture> = fixtures()
        .into_iter()
        .filter(|f| f.surface == "verify")
        .take(3)
        .collect();
    struct Nothing;
    impl cra_conformance::Target for Nothing {
        fn name(&self) -> String {
            "nothing".into()
        }
        fn claims(&self) -> Vec<String> {
            vec!["trace-core".into()]
        }
        fn play(&self, _: &Fixture) -> cra_conformance::Outcome {
            cra_conformance::Outcome::NotImplemented("nothing here".into())
        }
    }
    let report = run(&Nothing, &all, &Filter::default());
    assert_eq!(report.totals().not_implemented, 3);
    assert_eq!(report.totals().passed, 0);
    let verdicts = report.claim_verdicts();
    assert!(
        !verdicts[0].2,
        "a claim with only unimplemented cases must not hold"
    );
    assert_eq!(report.exit_code(), 2);
    assert!(
        report
            .render_text()
            .ends_with("results: 0 passed, 0 failed\n")
    );
}

/// The mutations each break one rule; the named fixtures must fail (and nothing errors).
#[test]
fn mutations_make_the_named_fixtures_fail() {
    let all = fixtures();
    let cases: &[(Mutation, &str, &[&str])] = &[
        (
            Mutation::HashFieldLeftOut,
            "hash-chain",
            &[
                "trace-hash-spec-example",
                "trace-hash-ascii",
                "trace-hash-field-parent-set",
            ],
        ),
        (
            Mutation::VerifierSkipsEvent0,
            "verify",
            &[
                "verify-genesis-hash-tampered",
                "verify-genesis-previous-not-zero",
                "verify-genesis-sequence-not-zero",
                "verify-genesis-event-hash-wrong",
            ],
        ),
        (
            Mutation::VerifierIgnoresEventFields,
            "verify",
            &[
                "verify-field-trace-version-2",
                "verify-field-event-id-not-uuid",
                "verify-field-trace-id-uppercase",
                "verify-field-parent-span-id-not-uuid",
                "verify-field-session-id-not-uuid",
                "verify-field-session-mixed",
                "verify-field-timestamp-no-zone",
                "verify-field-timestamp-not-an-instant",
            ],
        ),
        (
            Mutation::TraceKeysUnsorted,
            "hash-chain",
            &[
                "trace-canonical-key-order-codepoint",
                "trace-canonical-nested",
                "trace-hash-key-order-codepoint",
            ],
        ),
        (
            Mutation::DefaultAllow,
            "policy",
            &[
                "policy-no-policies-default-deny",
                "policy-partial-default-deny",
                "policy-rate-limit-does-not-grant",
                "policy-budget-does-not-grant",
            ],
        ),
        (
            Mutation::DenyNotBeatingAllow,
            "policy",
            &[
                "policy-deny-beats-allow",
                "policy-deny-star-segment",
                "policy-deny-all",
            ],
        ),
        (
            Mutation::UnknownCapabilitiesDropped,
            "resolve",
            &[
                "resolve-capability-unknown-partial",
                "resolve-capability-unknown-deny",
            ],
        ),
        (
            Mutation::ResolutionAnySession,
            "execute",
            &["execute-resolution-of-another-session"],
        ),
        (
            Mutation::RefusalAsErrorBody,
            "execute",
            &[
                "execute-response-denied-not-allowed",
                "execute-response-denied-unknown-resolution",
                "execute-response-denied-parameters",
                "execute-response-denied-expired",
                "execute-response-denied-rate-limit",
                "execute-response-denied-budget",
                "execute-response-pending-approval",
            ],
        ),
        (
            Mutation::ResolutionCacheOff,
            "resolve",
            &[
                "resolve-cache-identical-answered-again",
                "resolve-cache-recorded-in-resolution-trace",
                "resolve-cache-unopened-approval-answered-again",
            ],
        ),
        (
            Mutation::StreamResumesLate,
            "stream",
            &[
                "stream-resume-since-seq-middle",
                "stream-ended-session-resume-at-end",
            ],
        ),
        (
            Mutation::SupersessionNotClosing,
            "facts-supersession",
            &["fact-supersede-closes-old"],
        ),
        (
            Mutation::ValidateAsResolve,
            "resolve",
            &[
                "resolve-cache-validate-never-answers",
                "resolve-cache-validate-never-cached",
            ],
        ),
        (
            Mutation::PayloadFieldsDropped,
            "execute",
            &[
                "execute-payload-approved-names-its-resolution",
                "execute-payload-executed-duration",
                "execute-payload-violation-fields",
                "execute-denied-response-names-recorded-execution",
            ],
        ),
        (
            Mutation::ExecutorOfFirstAtlas,
            "execute",
            &["execute-executor-of-agent"],
        ),
        (
            Mutation::AtlasConflictReplaces,
            "http-errors",
            &["http-atlas-conflict-changes-nothing"],
        ),
        (
            Mutation::ReviewGateOff,
            "review",
            &[
                "review-human-by-author-refused",
                "review-human-by-agent-refused",
                "review-human-by-author-changes-nothing",
            ],
        ),
        (
            Mutation::PackageIdsGlobal,
            "pull",
            &[
                "pull-specific-ambiguous-id",
                "pull-specific-in-second-project",
                "pull-specific-not-in-named-project",
            ],
        ),
        (
            Mutation::PackageIdsGlobal,
            "review",
            &["review-flag-ambiguous-id", "review-flag-in-named-project"],
        ),
        (
            Mutation::RelayNullsKept,
            "content-hash",
            &[
                "content-hash-vector-P1-spec-6.7-minimal",
                "content-hash-nulls-optional",
                "content-hash-minimal",
            ],
        ),
    ];
    for (mutation, surface, must_fail) in cases {
        let filter = Filter {
            surface: Some((*surface).to_owned()),
            ..Filter::default()
        };
        let report = run(&InProcess::mutated(*mutation), &all, &filter);
        let failed: BTreeSet<String> = report.failed_ids().into_iter().collect();
        for id in *must_fail {
            assert!(
                failed.contains(*id),
                "{mutation:?}: {id} did not fail; failed: {failed:?}"
            );
        }
        assert_eq!(report.totals().errored, 0, "{mutation:?}: cases errored");
    }
}

#[test]
fn coverage_maps_every_must_to_existing_fixtures() {
    let ids: BTreeSet<String> = fixtures().into_iter().map(|f| f.id).collect();
    let text = read("COVERAGE.md");
    let mut rows = 0;
    let mut problems = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("| M-")) {
        rows += 1;
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let must = cells[1];
        // `| id | ref | requirement | fixtures |`: the fixtures are the last non-empty cell.
        let column = cells
            .iter()
            .rev()
            .find(|c| !c.is_empty())
            .copied()
            .unwrap_or_default();
        let listed: Vec<&str> = column.split('`').skip(1).step_by(2).collect();
        if listed.is_empty() {
            problems.push(format!("{must} lists no fixture"));
        }
        for id in listed {
            if !ids.contains(id) {
                problems.push(format!("{must} lists {id}, which does not exist"));
            }
        }
    }
    assert!(rows >= 40, "COVERAGE.md maps only {rows} MUSTs");
    // every interop case that records a deviation is listed in the deviation section
    let dev = text.split("## Deviations").nth(1).unwrap_or_default();
    for f in fixtures().iter().filter(|f| f.surface == "interop") {
        if f.notes.as_deref().is_some_and(|n| n.contains("Deviation"))
            && !dev.contains(&format!("`{}`", f.id))
        {
            problems.push(format!("deviation of {} not listed", f.id));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn backticked_in_section(text: &str, heading: &str) -> BTreeSet<String> {
    let section = text.split(heading).nth(1).unwrap_or_default();
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('`').nth(1).map(str::to_owned))
        .collect()
}

#[test]
fn readme_agrees_with_the_shipped_verbs_setup_keys_matchers_and_counts() {
    let text = read("README.md");
    let set = |v: &[&str]| {
        v.iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<String>>()
    };
    assert_eq!(
        backticked_in_section(&text, "## Verbs"),
        set(verbs::VERBS),
        "README verbs table"
    );
    assert_eq!(
        backticked_in_section(&text, "## Setup keys"),
        set(verbs::SETUP_KEYS),
        "README setup keys"
    );
    assert_eq!(
        backticked_in_section(&text, "## Matchers"),
        set(matcher::MATCHERS),
        "README matchers"
    );
    let all = fixtures();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for f in &all {
        *counts.entry(f.surface.clone()).or_default() += 1;
    }
    let section = text.split("## Counts").nth(1).unwrap_or_default();
    let mut stated: BTreeMap<String, usize> = BTreeMap::new();
    for l in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_owned();
        stated.insert(name, cells[2].parse().unwrap_or(usize::MAX));
    }
    assert_eq!(
        stated, counts,
        "README counts table (regenerate with conformance/tools/gen.py)"
    );
    assert!(
        text.contains(&format!("**{} fixtures**", all.len())),
        "README must state the total: **{} fixtures**",
        all.len()
    );
}

/// Plays the suite against a live server when `CRA_CONFORMANCE_URL` is set (CI starts `cra serve`
/// on loopback). Nothing may fail or error; unimplemented routes are reported, not failed.
#[test]
fn whole_suite_over_http_when_a_server_is_given() {
    let Ok(url) = std::env::var("CRA_CONFORMANCE_URL") else {
        println!("skipped: CRA_CONFORMANCE_URL not set");
        return;
    };
    let mut tokens = BTreeMap::new();
    for pair in std::env::var("CRA_CONFORMANCE_ACTOR_TOKENS")
        .unwrap_or_default()
        .split(',')
    {
        if let Some((actor, token)) = pair.split_once('=') {
            tokens.insert(actor.to_owned(), token.to_owned());
        }
    }
    let target = cra_conformance::target::http::HttpTarget::connect(
        &url,
        std::env::var("CRA_TOKEN").ok(),
        tokens,
    )
    .expect("the server answers");
    let report = run(&target, &fixtures(), &Filter::default());
    let text = report.render_text();
    println!("{text}");
    let known: BTreeSet<&str> = KNOWN_FAILURES.iter().map(|(id, _)| *id).collect();
    let unexpected: Vec<String> = report
        .failed_ids()
        .into_iter()
        .filter(|id| !known.contains(id.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "unexpected failures over HTTP: {unexpected:?}"
    );
    assert_eq!(
        report.totals().errored,
        0,
        "cases errored over HTTP:\n{text}"
    );
    assert_eq!(
        report.totals().not_implemented,
        0,
        "cra serve offers every verb:\n{text}"
    );
}

/// The whole suite over a real socket: a runtime serving on loopback as `cra serve --test-clock`
/// does (system clock, UUIDv7 ids, one key per fixture actor), played by the HTTP target exactly
/// as against any server. Every case passes and every claim of `GET /v1/conformance` holds.
#[test]
fn whole_suite_over_a_socket_against_the_runtime() {
    use cra_conformance::target::runtime::{RouterTransport, actor_keys_toml, token_of};
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = dir.path().join("keys.toml");
    std::fs::write(&keys, actor_keys_toml()).expect("keys written");
    let mut config = cra_runtime::RuntimeConfig {
        addr: "127.0.0.1:0".into(),
        data: dir.path().join("data"),
        api_keys: Some(keys),
        test_clock: true,
        ..cra_runtime::RuntimeConfig::default()
    };
    config.limits.requests_per_second = 0;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let server = rt.block_on(async {
        let (state, _) = cra_runtime::build_runtime(
            config,
            std::sync::Arc::new(cra_wire::SystemClock),
            std::sync::Arc::new(cra_wire::UuidV7Ids),
        )
        .expect("runtime builds");
        cra_runtime::start(state, std::future::pending())
            .await
            .expect("server starts")
    });
    let target = cra_conformance::target::http::HttpTarget::connect(
        &format!("http://{}", server.addr),
        Some(token_of("admin")),
        RouterTransport::actor_tokens(),
    )
    .expect("the server answers");
    assert_eq!(
        target.claims(),
        ["L3", "carp-core", "trace-core", "atlas-core", "cra-full"]
    );
    let all = fixtures();
    let report = run(&target, &all, &Filter::default());
    let text = report.render_text();
    println!("{text}");
    let t = report.totals();
    assert_eq!(
        (t.passed, t.failed, t.errored, t.not_implemented),
        (all.len(), 0, 0, 0),
        "{text}"
    );
    assert_eq!(report.exit_code(), 0, "{text}");
    rt.block_on(server.shutdown()).expect("graceful stop");
}

//! The wire shapes the HTTP routes and `cra relay` print: the §7 fact object, the
//! `{packages, quarantined}` listing with the filters of `pull`, a project's share of an export,
//! and the NDJSON bundle an export travels in.

use std::sync::Arc;

use cra_relay::export::{FILES, MANIFEST, bundle, only_project, parse, render, unbundle};
use cra_relay::store::SearchQuery;
use cra_relay::store::memory::MemoryStore;
use cra_relay::testkit::{self, PROJECT, jordan};
use serde_json::{Value, json};

#[test]
fn a_fact_on_the_wire_is_the_section_7_object_plus_what_the_asserter_sent() {
    let (r, _) = testkit::relay(Arc::new(MemoryStore::new()));
    r.create_project(PROJECT, "Relay dev").unwrap();
    let rec = r
        .assert_fact(
            PROJECT,
            &jordan(),
            &json!({"subject": "svc", "predicate": "owner", "value": "ana", "confidence": 0.5,
                    "x-origin": {"tool": "cli"}, "note": "kept"}),
        )
        .unwrap();
    let wire = rec.to_wire();
    // The same object serde would produce for the fact, and never the recorded times.
    assert_eq!(wire, serde_json::to_value(&rec.fact).unwrap());
    let mut keys: Vec<&str> = wire
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "asserted_by",
            "confidence",
            "created_at",
            "fact_id",
            "note",
            "predicate",
            "project_id",
            "source_package_id",
            "subject",
            "tags",
            "valid_from",
            "valid_to",
            "value",
            "x-origin"
        ]
    );
    assert_eq!(wire["confidence"].to_string(), "0.5");
    assert_eq!(wire["valid_to"], Value::Null);
    assert_eq!(
        wire["asserted_by"],
        json!({"id": "jordan", "type": "human", "session_id": null})
    );
}

fn deposit(r: &cra_relay::Relay, id: &str, extra: Value) {
    let mut p = testkit::package(id, "complete");
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    r.deposit(PROJECT, &jordan(), &p).unwrap();
}

#[test]
fn latest_with_filters_lists_newest_first_and_checks_its_times() {
    let (r, _) = testkit::relay(Arc::new(MemoryStore::new()));
    r.create_project(PROJECT, "Relay dev").unwrap();
    deposit(
        &r,
        "pkg_a",
        json!({"topic": "search", "tags": ["perf"], "created_at": "2026-01-01T00:00:00Z"}),
    );
    deposit(
        &r,
        "pkg_b",
        json!({"topic": "ui", "tags": ["perf", "ui"], "created_at": "2026-02-01T00:00:00Z"}),
    );
    deposit(
        &r,
        "pkg_c",
        json!({"topic": "search", "package_type": "milestone", "created_at": "2026-02-28T23:00:00Z"}),
    );
    let ids = |q: SearchQuery| -> Vec<String> {
        r.pull_latest_matching(&q)
            .unwrap()
            .packages
            .iter()
            .map(|p| p.package.package_id().to_owned())
            .collect()
    };
    let q = |f: &dyn Fn(&mut SearchQuery)| {
        let mut q = SearchQuery {
            project_id: PROJECT.into(),
            limit: 10,
            ..SearchQuery::default()
        };
        f(&mut q);
        q
    };
    assert_eq!(ids(q(&|_| {})), ["pkg_c", "pkg_b", "pkg_a"]);
    assert_eq!(
        ids(q(&|q| q.topic = Some("search".into()))),
        ["pkg_c", "pkg_a"]
    );
    assert_eq!(
        ids(q(&|q| q.tags = vec!["perf".into(), "ui".into()])),
        ["pkg_b"]
    );
    assert_eq!(
        ids(q(&|q| q.package_type = Some("milestone".into()))),
        ["pkg_c"]
    );
    // Query times in any RFC 3339 form (a package's own `created_at` is always UTC); `until`
    // is exclusive, so the package created at exactly 23:00 UTC is not before it.
    assert_eq!(
        ids(q(&|q| q.until = Some("2026-02-28T23:00:00Z".into()))),
        ["pkg_b", "pkg_a"]
    );
    assert_eq!(
        ids(q(&|q| q.since = Some("2026-01-15T00:00:00.5+00:00".into()))),
        ["pkg_c", "pkg_b"]
    );
    assert_eq!(ids(q(&|q| q.limit = 1)), ["pkg_c"]);
    // limit 0 is the default (5), out-of-range limits and bad times are refused with a pointer.
    assert_eq!(ids(q(&|q| q.limit = 0)).len(), 3);
    for (f, pointer) in [
        (
            &(|q: &mut SearchQuery| q.since = Some("yesterday".into()))
                as &dyn Fn(&mut SearchQuery),
            "/since",
        ),
        (
            &|q: &mut SearchQuery| q.until = Some("2026-13-01T00:00:00Z".into()),
            "/until",
        ),
        (&|q: &mut SearchQuery| q.limit = 1001, "/limit"),
    ] {
        let body = r.pull_latest_matching(&q(f)).unwrap_err().to_body();
        assert_eq!(body.error, "invalid_schema");
        assert_eq!(body.details.unwrap().errors[0].pointer, pointer);
    }
    let pulled = r
        .pull_latest_matching(&q(&|q| q.topic = Some("ui".into())))
        .unwrap();
    let wire = pulled.to_wire();
    assert_eq!(wire["packages"][0]["package_id"], "pkg_b");
    assert!(
        wire["packages"][0]["content_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(wire["quarantined"], json!([]));
    // Without a search index, relevant is 501 naming the capability.
    let body = r
        .search(&q(&|q| q.query = "perf".into()))
        .unwrap_err()
        .to_body();
    assert_eq!(
        (body.error.as_str(), body.capability.as_deref()),
        ("search_not_supported", Some("search"))
    );
}

#[test]
fn a_project_export_holds_that_project_only_and_verifies() {
    let (r, clock) = testkit::relay(Arc::new(MemoryStore::new()));
    testkit::populate(&r, &clock, 30, 20);
    let all = r.store().snapshot().unwrap();
    let b = only_project(&all, "proj_b");
    assert_eq!(b.projects.len(), 1);
    assert_eq!(b.packages.len(), 10);
    assert!(
        b.packages
            .iter()
            .all(|p| p.package.project_id() == "proj_b")
    );
    assert!(b.facts.is_empty() && b.sessions.is_empty());
    // Of the flagged packages (every tenth), only pkg_000000 is in proj_b (every third).
    assert_eq!(b.reviews.len(), 1, "{:?}", b.reviews);
    let main = only_project(&all, PROJECT);
    assert_eq!(main.packages.len() + b.packages.len(), all.packages.len());
    assert_eq!(main.facts.len(), all.facts.len());
    let back = parse(&render(&b).unwrap()).unwrap();
    assert_eq!(back, b);
    assert!(only_project(&all, "nope").projects.is_empty());
}

#[test]
fn a_bundle_carries_the_export_files_byte_for_byte() {
    let (r, clock) = testkit::relay(Arc::new(MemoryStore::new()));
    testkit::populate(&r, &clock, 20, 30);
    let files = render(&r.store().snapshot().unwrap()).unwrap();
    let b = bundle(&files);
    // Every line is JSON; each file is announced by a header.
    for line in b.split(|c| *c == b'\n').filter(|l| !l.is_empty()) {
        serde_json::from_slice::<Value>(line).unwrap();
    }
    assert_eq!(unbundle(&b).unwrap(), files);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..5], FILES);
    assert_eq!(names[5], MANIFEST);
    // An empty store's bundle: five empty files and a manifest.
    let empty = render(&Default::default()).unwrap();
    assert_eq!(unbundle(&bundle(&empty)).unwrap(), empty);

    let text = String::from_utf8(b.clone()).unwrap();
    let bad = |bytes: &[u8]| unbundle(bytes).unwrap_err().to_string();
    assert!(bad(b"{\"file\":\"../../etc/passwd\",\"lines\":0}\n").contains("must name one of"));
    assert!(bad(b"not json\n").contains("line 1"));
    assert!(bad(b"{\"file\":\"facts.ndjson\"}\n").contains("lines"));
    let twice =
        b"{\"file\":\"facts.ndjson\",\"lines\":0}\n{\"file\":\"facts.ndjson\",\"lines\":0}\n";
    assert!(bad(twice).contains("appears twice"));
    // Cut short: the last file misses lines.
    let cut = &text[..text.len() - 2];
    let cut = &cut[..cut.rfind('\n').unwrap()];
    assert!(
        bad(cut.as_bytes()).contains("fewer than"),
        "{}",
        bad(cut.as_bytes())
    );
    // A blank line where a header belongs.
    assert!(bad(format!("\n{text}").as_bytes()).contains("empty line"));
    // Unbundled but tampered: parse names the package.
    let tampered = text.replacen("Package pkg_000001", "Package pkg_000001!", 1);
    let err = parse(&unbundle(tampered.as_bytes()).unwrap()).unwrap_err();
    assert_eq!(err.token(), cra_wire::Token::IntegrityError);
    assert!(err.to_string().contains("pkg_000001"), "{err}");
}

/// A package states `created_at` in UTC: another offset, or none, is refused at `/created_at`
/// and nothing is stored (issue 22 B.13).
#[test]
fn a_created_at_not_in_utc_is_refused() {
    let (r, _) = testkit::relay(Arc::new(MemoryStore::new()));
    r.create_project(PROJECT, "Relay dev").unwrap();
    for at in [
        "2026-03-01T00:00:00+01:00",
        "2026-03-01T00:00:00",
        "2026-03-01T00:00:00-00:30",
    ] {
        let mut p = testkit::package("pkg_tz", "complete");
        p["created_at"] = json!(at);
        let e = r.deposit(PROJECT, &jordan(), &p).unwrap_err();
        assert!(format!("{e:?}").contains("/created_at"), "{at}: {e:?}");
    }
    for at in ["2026-03-01T00:00:00Z", "2026-03-01T00:00:00.250+00:00"] {
        let mut p = testkit::package(&format!("pkg_{}", at.len()), "complete");
        p["created_at"] = json!(at);
        r.deposit(PROJECT, &jordan(), &p).unwrap();
    }
}

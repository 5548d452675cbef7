//! The backend-independent test suite (feature `test-support`): every [`RelayStore`]
//! implementation runs the same cases ([`SUITE`]) through [`Relay`], each on a fresh store from
//! a factory. One case per conformance item of §11 (L0-L3), per §8 error token and per §5.3
//! status transition; plus concurrency, integrity and export round trips.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    clippy::indexing_slicing
)]

use std::sync::Arc;

use cra_wire::{FixedClock, SequentialIds, Token};
use serde_json::{Value, json};

use crate::fact::{FactQuery, FactView, check_history};
use crate::model::{Actor, ActorType, Status, StoredPackage};
use crate::ops::Relay;
use crate::session::{SeededCallsigns, is_callsign};
use crate::store::{
    InsertOutcome, PackageFilter, RelayStore, RelayStoreError as StoreError, Snapshot,
};

/// A store factory: a fresh, empty store per call.
pub type Factory<'a> = &'a dyn Fn() -> Arc<dyn RelayStore>;

/// One case.
pub type Case = fn(Factory<'_>);

/// Every case, by name.
pub const SUITE: &[(&str, Case)] = &[
    ("l0_pull_specific_and_latest", l0_pull_specific_and_latest),
    (
        "l0_unknown_and_extension_fields_round_trip",
        l0_unknown_fields_round_trip,
    ),
    ("l0_orient_bundle", l0_orient_bundle),
    (
        "l1_deposit_hashes_match_vectors",
        l1_deposit_hashes_match_vectors,
    ),
    ("l1_idempotent_deposit", l1_idempotent_deposit),
    ("err_duplicate_package_id", err_duplicate_package_id),
    (
        "package_ids_are_unique_per_project",
        package_ids_are_unique_per_project,
    ),
    ("err_invalid_schema_pointers", err_invalid_schema_pointers),
    ("err_project_archived", err_project_archived),
    ("err_identity_mismatch", err_identity_mismatch),
    ("err_package_not_found", err_package_not_found),
    ("err_project_not_found", err_project_not_found),
    (
        "err_search_not_supported_or_search_works",
        err_search_not_supported,
    ),
    ("err_integrity_quarantine", err_integrity_quarantine),
    ("l2_assert_supersedes_atomically", l2_assert_supersedes),
    ("l2_point_in_time_queries", l2_point_in_time_queries),
    ("l2_invalidate_counts", l2_invalidate_counts),
    ("l2_fact_source_package", l2_fact_source_package),
    ("l2_concurrent_assert_16_threads", l2_concurrent_assert),
    (
        "l2_recorded_time_never_goes_back",
        l2_recorded_time_never_goes_back,
    ),
    ("l3_status_transitions", l3_status_transitions),
    (
        "l3_flag_review_and_awaiting_list",
        l3_flag_review_and_awaiting_list,
    ),
    ("l3_review_gates", l3_review_gates),
    (
        "sessions_callsign_and_provenance",
        sessions_callsign_and_provenance,
    ),
    ("orchestrate_digest", orchestrate_digest),
    (
        "orient_window_answers_as_a_full_scan",
        orient_window_answers_as_a_full_scan,
    ),
    ("orient_reads_only_the_window", orient_reads_only_the_window),
    ("export_import_round_trip", export_import_round_trip),
    (
        "import_refuses_tampered_package",
        import_refuses_tampered_package,
    ),
];

/// Runs every case of [`SUITE`], printing each name.
pub fn run_all(factory: Factory<'_>) {
    for (name, case) in SUITE {
        println!("relay suite: {name}");
        case(factory);
    }
}

pub const PROJECT: &str = "proj_dev_relay";
pub const START: &str = "2026-04-18T20:00:00Z";

/// A Relay over `store` with a fixed clock at [`START`], deterministic ids and callsigns.
pub fn relay(store: Arc<dyn RelayStore>) -> (Relay, Arc<FixedClock>) {
    let clock = Arc::new(FixedClock::parse(START).unwrap());
    let r = Relay::new(
        store,
        clock.clone(),
        Arc::new(SequentialIds::new(1_776_542_400_000, 6)),
        Arc::new(SeededCallsigns::new(42)),
    );
    (r, clock)
}

pub fn jordan() -> Actor {
    Actor::new("jordan", ActorType::Human)
}

fn reviewer() -> Actor {
    Actor::new("rev-bot", ActorType::Agent)
}

/// A human who is not the author of [`package`]s (jordan is).
fn casey() -> Actor {
    Actor::new("casey", ActorType::Human)
}

fn setup(factory: Factory<'_>) -> (Relay, Arc<FixedClock>) {
    let (r, c) = relay(factory());
    r.create_project(PROJECT, "Relay dev").unwrap();
    (r, c)
}

fn vectors() -> Vec<Value> {
    let v: Value =
        serde_json::from_str(include_str!("../tests/fixtures/hash-vectors.json")).unwrap();
    v["vectors"].as_array().unwrap().clone()
}

/// A valid package with id `id`, status `status`, created at [`START`].
pub fn package(id: &str, status: &str) -> Value {
    json!({
        "package_id": id,
        "project_id": PROJECT,
        "relay_version": "0.1",
        "title": format!("Package {id}"),
        "status": status,
        "package_type": "standard",
        "review_type": "none",
        "created_at": START,
        "created_by": {"id": "jordan", "type": "human", "session_id": null},
        "open_questions": ["Who owns the dashboard?"],
        "decisions_made": [format!("decided {id}")],
        "handoff_note": format!("handoff from {id}"),
    })
}

fn token_of<T: std::fmt::Debug>(r: Result<T, crate::RelayError>) -> Token {
    r.unwrap_err().token()
}

fn l0_pull_specific_and_latest(f: Factory<'_>) {
    let (r, _) = setup(f);
    for i in 0..7 {
        r.deposit(
            PROJECT,
            &jordan(),
            &package(&format!("pkg_{i}"), "complete"),
        )
        .unwrap();
    }
    let one = r.pull_specific(PROJECT, "pkg_3").unwrap();
    assert_eq!(one.package.package_id(), "pkg_3");
    let latest = r.pull_latest(PROJECT, None).unwrap();
    let ids: Vec<&str> = latest
        .packages
        .iter()
        .map(|p| p.package.package_id())
        .collect();
    assert_eq!(
        ids,
        ["pkg_6", "pkg_5", "pkg_4", "pkg_3", "pkg_2"],
        "default limit 5, newest first"
    );
    assert_eq!(r.pull_latest(PROJECT, Some(2)).unwrap().packages.len(), 2);
    assert_eq!(
        token_of(r.pull_latest(PROJECT, Some(0))),
        Token::InvalidSchema
    );
}

fn l0_unknown_fields_round_trip(f: Factory<'_>) {
    let (r, _) = setup(f);
    let mut p = package("pkg_x", "complete");
    p["x-trust-score"] = json!(0.75);
    p["child_package_ids"] = json!(["a", "b"]);
    p["deliverables"] = json!([{"path": "docs/a.md", "type": "md", "x-extra": {"k": [1, 2]}}]);
    let d = r.deposit(PROJECT, &jordan(), &p).unwrap();
    let back = r.pull_specific(PROJECT, "pkg_x").unwrap().to_wire();
    let mut expected = p.clone();
    expected["content_hash"] = json!(d.stored.content_hash);
    assert_eq!(back, expected, "every field, known or not, round-trips");
}

fn l0_orient_bundle(f: Factory<'_>) {
    let (r, clock) = setup(f);
    let mut old = package("pkg_old", "complete");
    old["created_at"] = json!("2026-03-01T00:00:00Z");
    r.deposit(PROJECT, &jordan(), &old).unwrap();
    r.deposit(PROJECT, &jordan(), &package("pkg_a", "complete"))
        .unwrap();
    let mut b = package("pkg_b", "complete");
    b["open_questions"] = json!(["Who owns the dashboard?", "Ship on Friday?"]);
    r.deposit(PROJECT, &jordan(), &b).unwrap();
    r.assert_fact(
        PROJECT,
        &jordan(),
        &json!({"subject": "dash", "predicate": "owner", "value": "ana"}),
    )
    .unwrap();
    clock.advance(time::Duration::hours(1));
    let o = r.orient(PROJECT, None).unwrap();
    assert_eq!(o.window_days, 14);
    let ids: Vec<&str> = o
        .recent_packages
        .iter()
        .map(|p| p["package_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["pkg_b", "pkg_a"], "outside the window excluded");
    assert_eq!(
        o.open_questions,
        ["Who owns the dashboard?", "Ship on Friday?"],
        "deduplicated"
    );
    assert_eq!(o.active_facts.len(), 1);
    assert_eq!(o.generated_at, "2026-04-18T21:00:00.000000Z");
    let md = crate::digest::orientation_markdown(&o);
    let handoff = md.find("handoff from pkg_b").unwrap();
    assert!(
        handoff < md.find("## Decisions").unwrap(),
        "latest handoff first:\n{md}"
    );
    assert!(md.contains("- Ship on Friday?"));
    assert!(md.contains("dash / owner: ana"));
    assert_eq!(
        r.orient(PROJECT, Some(60)).unwrap().recent_packages.len(),
        3
    );
}

fn l1_deposit_hashes_match_vectors(f: Factory<'_>) {
    for v in vectors() {
        let id = v["id"].as_str().unwrap().to_owned();
        let (r, _) = relay(f());
        let pkg = v["package"].clone();
        let project = pkg["project_id"].as_str().unwrap();
        r.create_project(project, "vectors").unwrap();
        let actor = Actor::new(pkg["created_by"]["id"].as_str().unwrap(), ActorType::Human);
        match r.deposit(project, &actor, &pkg) {
            Ok(d) => {
                assert_eq!(
                    d.stored.content_hash,
                    v["content_hash"].as_str().unwrap(),
                    "{id}"
                );
                let read = r
                    .pull_specific(project, d.stored.package.package_id())
                    .unwrap();
                assert_eq!(
                    read.content_hash, d.stored.content_hash,
                    "{id}: verified on read"
                );
            }
            // P5 is a hashing vector with a null inside `tags`, which §6.4 forbids on deposit.
            Err(crate::RelayError::InvalidSchema { errors, .. }) => {
                assert_eq!(id, "P5-rich");
                assert_eq!(errors[0].pointer, "/tags/1");
            }
            Err(e) => panic!("{id}: {e}"),
        }
    }
}

fn l1_idempotent_deposit(f: Factory<'_>) {
    let (r, _) = setup(f);
    let p = package("pkg_idem", "complete");
    let first = r.deposit(PROJECT, &jordan(), &p).unwrap();
    assert!(first.created);
    // Same content, keys reordered and the hash sent back: the stored package, not an error.
    let mut again: serde_json::Map<String, Value> =
        p.as_object().unwrap().clone().into_iter().rev().collect();
    again.insert("content_hash".into(), json!(first.stored.content_hash));
    let second = r
        .deposit(PROJECT, &jordan(), &Value::Object(again))
        .unwrap();
    assert!(!second.created);
    assert_eq!(second.stored, first.stored);
    assert_eq!(r.pull_latest(PROJECT, Some(10)).unwrap().packages.len(), 1);
}

fn err_duplicate_package_id(f: Factory<'_>) {
    let (r, _) = setup(f);
    r.deposit(PROJECT, &jordan(), &package("pkg_dup", "complete"))
        .unwrap();
    let mut changed = package("pkg_dup", "complete");
    changed["title"] = json!("Different");
    let e = r.deposit(PROJECT, &jordan(), &changed).unwrap_err();
    assert_eq!(e.token(), Token::DuplicatePackageId);
    assert_eq!(e.http_status(), 409);
    assert_eq!(
        r.pull_specific(PROJECT, "pkg_dup").unwrap().package.title(),
        "Package pkg_dup"
    );
}

fn err_invalid_schema_pointers(f: Factory<'_>) {
    let (r, _) = setup(f);
    let fx: Value =
        serde_json::from_str(include_str!("../tests/fixtures/invalid-packages.json")).unwrap();
    for case in fx["cases"].as_array().unwrap() {
        let mut p = fx["base"].clone();
        if let Some(set) = case["set"].as_object() {
            for (k, v) in set {
                p[k] = v.clone();
            }
        }
        for k in case["remove"].as_array().into_iter().flatten() {
            p.as_object_mut().unwrap().remove(k.as_str().unwrap());
        }
        let e = r.deposit(PROJECT, &jordan(), &p).unwrap_err();
        let body = e.to_body();
        assert_eq!(body.error, "invalid_schema", "{}", case["name"]);
        let got: Vec<&str> = body
            .details
            .as_ref()
            .unwrap()
            .errors
            .iter()
            .map(|e| e.pointer.as_str())
            .collect();
        let want: Vec<&str> = case["pointers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(got, want, "{}", case["name"]);
    }
    assert!(
        r.pull_latest(PROJECT, None).unwrap().packages.is_empty(),
        "nothing stored"
    );
    let mut wrong_project = package("pkg_wp", "complete");
    wrong_project["project_id"] = json!("proj_other");
    let e = r.deposit(PROJECT, &jordan(), &wrong_project).unwrap_err();
    assert_eq!(
        e.to_body().details.unwrap().errors[0].pointer,
        "/project_id"
    );
}

fn err_project_archived(f: Factory<'_>) {
    let (r, _) = setup(f);
    r.deposit(PROJECT, &jordan(), &package("pkg_d", "draft"))
        .unwrap();
    r.archive(PROJECT).unwrap();
    let e = r
        .deposit(PROJECT, &jordan(), &package("pkg_1", "complete"))
        .unwrap_err();
    assert_eq!((e.token(), e.http_status()), (Token::ProjectArchived, 403));
    assert_eq!(
        token_of(r.assert_fact(
            PROJECT,
            &jordan(),
            &json!({"subject":"s","predicate":"p","value":"v"})
        )),
        Token::ProjectArchived
    );
    assert_eq!(
        token_of(r.flag_for_review(PROJECT, "pkg_d", "human", None, &jordan())),
        Token::ProjectArchived
    );
    assert_eq!(
        token_of(r.invalidate_fact(PROJECT, "s", "p")),
        Token::ProjectArchived
    );
    // Reads still work; unarchive restores writes.
    assert!(r.pull_specific(PROJECT, "pkg_d").is_ok());
    r.unarchive(PROJECT).unwrap();
    r.deposit(PROJECT, &jordan(), &package("pkg_1", "complete"))
        .unwrap();
}

fn err_identity_mismatch(f: Factory<'_>) {
    let (r, _) = setup(f);
    let mallory = Actor::new("mallory", ActorType::Agent);
    let e = r
        .deposit(PROJECT, &mallory, &package("pkg_m", "complete"))
        .unwrap_err();
    assert_eq!((e.token(), e.http_status()), (Token::IdentityMismatch, 403));
    assert!(e.to_string().contains("mallory"));
    let e = r
        .assert_fact(PROJECT, &mallory, &json!({"subject":"s","predicate":"p","value":"v","asserted_by":{"id":"jordan","type":"human"}}))
        .unwrap_err();
    assert_eq!(e.token(), Token::IdentityMismatch);
    assert_eq!(
        token_of(r.pull_specific(PROJECT, "pkg_m")),
        Token::PackageNotFound
    );
    // The type is the authenticated actor's too: an agent key named jordan cannot deposit or
    // assert as the human jordan.
    let agent_jordan = Actor::new("jordan", ActorType::Agent);
    let e = r
        .deposit(PROJECT, &agent_jordan, &package("pkg_m", "complete"))
        .unwrap_err();
    assert_eq!((e.token(), e.http_status()), (Token::IdentityMismatch, 403));
    assert_eq!(
        e.to_body().details.unwrap().errors[0].pointer,
        "/created_by/type"
    );
    assert_eq!(
        token_of(r.pull_specific(PROJECT, "pkg_m")),
        Token::PackageNotFound
    );
    let e = r
        .assert_fact(PROJECT, &agent_jordan, &json!({"subject":"s","predicate":"p","value":"v","asserted_by":{"id":"jordan","type":"human"}}))
        .unwrap_err();
    assert_eq!(e.token(), Token::IdentityMismatch);
    assert!(r.facts(PROJECT, &FactQuery::default()).unwrap().is_empty());
}

/// Review gates (specs/relay.md, "Review gates"): a `human` review is closed only by a human who
/// is not the author, an `agent` review only by an agent who is not the author; a refusal is
/// 403 `review_not_allowed` and changes nothing.
fn l3_review_gates(f: Factory<'_>) {
    let (r, _) = setup(f);
    let bot = Actor::new("writer-bot", ActorType::Agent);
    let mut by_bot = package("pkg_b", "draft");
    by_bot["created_by"] = json!({"id": "writer-bot", "type": "agent"});
    for (p, a) in [(package("pkg_h", "draft"), jordan()), (by_bot, bot.clone())] {
        r.deposit(PROJECT, &a, &p).unwrap();
    }
    r.flag_for_review(PROJECT, "pkg_h", "human", None, &jordan())
        .unwrap();
    r.flag_for_review(PROJECT, "pkg_b", "agent", None, &bot)
        .unwrap();
    let refused = |id: &str, who: &Actor| {
        let before = r.pull_specific(PROJECT, id).unwrap();
        let records = r.reviews(PROJECT, id).unwrap().len();
        let e = r.review(PROJECT, id, "complete", None, who).unwrap_err();
        assert_eq!(
            (e.token(), e.http_status()),
            (Token::ReviewNotAllowed, 403),
            "{id} by {who:?}"
        );
        assert_eq!(r.pull_specific(PROJECT, id).unwrap(), before, "unchanged");
        assert_eq!(
            r.reviews(PROJECT, id).unwrap().len(),
            records,
            "no review record"
        );
    };
    // Human review: not the author, not an agent (not even one carrying a human's id).
    refused("pkg_h", &jordan());
    refused("pkg_h", &reviewer());
    refused("pkg_h", &Actor::new("casey", ActorType::Agent));
    // Agent review: not the author, not a human.
    refused("pkg_b", &bot);
    refused("pkg_b", &casey());
    // A human gate cannot be lowered by a non-human re-flag.
    let sent_back = r
        .review(PROJECT, "pkg_h", "revision_requested", None, &casey())
        .unwrap();
    assert_eq!(sent_back.package.review_type(), "human");
    assert_eq!(
        token_of(r.flag_for_review(PROJECT, "pkg_h", "agent", None, &bot)),
        Token::ReviewNotAllowed
    );
    refused("pkg_h", &reviewer());
    r.flag_for_review(PROJECT, "pkg_h", "human", None, &jordan())
        .unwrap();
    let done = r
        .review(PROJECT, "pkg_h", "complete", None, &casey())
        .unwrap();
    assert_eq!(done.package.status(), Status::Complete);
    let done = r
        .review(PROJECT, "pkg_b", "complete", None, &reviewer())
        .unwrap();
    assert_eq!(done.package.status(), Status::Complete);
    assert_eq!(r.reviews(PROJECT, "pkg_b").unwrap()[1].actor, reviewer());
    // A draft declared for human review is finished by a human reviewer too, not its author.
    let mut gated = package("pkg_g", "draft");
    gated["review_type"] = json!("human");
    r.deposit(PROJECT, &jordan(), &gated).unwrap();
    refused_draft(&r, "pkg_g");
    r.review(PROJECT, "pkg_g", "complete", None, &casey())
        .unwrap();
    // Without a declared gate the author finishes their own draft.
    r.deposit(PROJECT, &jordan(), &package("pkg_d", "draft"))
        .unwrap();
    r.review(PROJECT, "pkg_d", "complete", None, &jordan())
        .unwrap();
}

fn refused_draft(r: &Relay, id: &str) {
    let e = r
        .review(PROJECT, id, "complete", None, &jordan())
        .unwrap_err();
    assert_eq!(e.token(), Token::ReviewNotAllowed);
    assert_eq!(
        r.pull_specific(PROJECT, id).unwrap().package.status(),
        Status::Draft
    );
    assert!(r.reviews(PROJECT, id).unwrap().is_empty());
}

fn err_package_not_found(f: Factory<'_>) {
    let (r, _) = setup(f);
    let e = r.pull_specific(PROJECT, "pkg_nope").unwrap_err();
    assert_eq!((e.token(), e.http_status()), (Token::PackageNotFound, 404));
    assert_eq!(
        token_of(r.flag_for_review(PROJECT, "pkg_nope", "human", None, &jordan())),
        Token::PackageNotFound
    );
}

fn err_project_not_found(f: Factory<'_>) {
    let (r, _) = relay(f());
    assert_eq!(
        token_of(r.deposit("proj_none", &jordan(), &package("p", "complete"))),
        Token::InvalidSchema
    );
    let mut p = package("p", "complete");
    p["project_id"] = json!("proj_none");
    assert_eq!(
        token_of(r.deposit("proj_none", &jordan(), &p)),
        Token::ProjectNotFound
    );
    assert_eq!(
        token_of(r.orient("proj_none", None)),
        Token::ProjectNotFound
    );
    r.create_project("proj_a", "A").unwrap();
    assert_eq!(
        token_of(r.create_project("proj_a", "A")),
        Token::AlreadyExists
    );
}

fn err_search_not_supported(f: Factory<'_>) {
    let (r, _) = setup(f);
    r.deposit(PROJECT, &jordan(), &package("pkg_s", "complete"))
        .unwrap();
    let q = crate::store::SearchQuery {
        project_id: PROJECT.into(),
        query: "handoff".into(),
        limit: 5,
        ..Default::default()
    };
    match r.pull_relevant(&q) {
        Err(e) => {
            assert!(!r.conformance().capabilities.keyword_search);
            assert_eq!(
                (e.token(), e.http_status()),
                (Token::SearchNotSupported, 501)
            );
            assert_eq!(e.to_body().capability.as_deref(), Some("search"));
        }
        Ok(hits) => {
            assert!(r.conformance().capabilities.keyword_search);
            assert_eq!(hits[0].package.package.package_id(), "pkg_s");
        }
    }
}

fn err_integrity_quarantine(f: Factory<'_>) {
    let store = f();
    let (r, _) = relay(store.clone());
    r.create_project(PROJECT, "x").unwrap();
    let good = r
        .deposit(PROJECT, &jordan(), &package("pkg_good", "complete"))
        .unwrap()
        .stored;
    // Build a tampered copy through restore (which trusts its input) in a second store.
    let mut snap = store.snapshot().unwrap();
    let mut wire = good.to_wire();
    wire["title"] = json!("Tampered");
    wire["package_id"] = json!("pkg_bad");
    snap.packages.push(StoredPackage::from_wire(&wire).unwrap());
    let store2 = f();
    store2.restore(&snap).unwrap();
    let (r2, _) = relay(store2);
    let e = r2.pull_specific(PROJECT, "pkg_bad").unwrap_err();
    assert_eq!((e.token(), e.http_status()), (Token::IntegrityError, 409));
    assert!(e.to_string().contains("pkg_bad"));
    let listed = r2.pull_latest(PROJECT, None).unwrap();
    assert_eq!(listed.packages.len(), 1, "quarantined package hidden");
    assert!(
        r2.pull_specific(PROJECT, "pkg_bad").is_err(),
        "stays quarantined"
    );
    let all = r2.list(
        PROJECT,
        &PackageFilter {
            include_quarantined: true,
            ..Default::default()
        },
    );
    assert_eq!(all.unwrap().quarantined, ["pkg_bad"]);
}

fn fact(subject: &str, value: &str, valid_from: Option<&str>) -> Value {
    let mut v = json!({"subject": subject, "predicate": "status", "value": value});
    if let Some(t) = valid_from {
        v["valid_from"] = json!(t);
    }
    v
}

fn l2_assert_supersedes(f: Factory<'_>) {
    let (r, clock) = setup(f);
    let a = r
        .assert_fact(PROJECT, &jordan(), &fact("dash", "red", None))
        .unwrap();
    assert!(a.fact.fact_id.starts_with("fact_") && a.fact.fact_id.len() == 37);
    assert_eq!(a.fact.confidence.to_string(), "1");
    clock.advance(time::Duration::minutes(5));
    let b = r
        .assert_fact(PROJECT, &jordan(), &fact("dash", "green", None))
        .unwrap();
    let cur = r.facts(PROJECT, &FactQuery::default()).unwrap();
    assert_eq!(cur.len(), 1);
    assert_eq!(cur[0].fact.value, "green");
    let hist = r
        .facts(
            PROJECT,
            &FactQuery {
                view: FactView::History,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(hist.len(), 2);
    assert_eq!(
        hist[0].fact.valid_to.as_deref(),
        Some(b.fact.valid_from.as_str())
    );
    check_history(&hist).unwrap();
    // A valid_from earlier than the current fact's is refused, and nothing changes.
    let e = r
        .assert_fact(
            PROJECT,
            &jordan(),
            &fact("dash", "blue", Some("2020-01-01T00:00:00Z")),
        )
        .unwrap_err();
    assert_eq!(e.token(), Token::InvalidSchema);
    assert_eq!(
        r.facts(
            PROJECT,
            &FactQuery {
                view: FactView::History,
                ..Default::default()
            }
        )
        .unwrap()
        .len(),
        2
    );
    // Bad inputs name their fields.
    let e = r
        .assert_fact(
            PROJECT,
            &jordan(),
            &json!({"subject": "", "predicate": "p", "value": 5, "confidence": 2}),
        )
        .unwrap_err();
    let ptrs: Vec<String> = e
        .to_body()
        .details
        .unwrap()
        .errors
        .into_iter()
        .map(|e| e.pointer)
        .collect();
    assert_eq!(ptrs, ["/subject", "/value", "/confidence"]);
}

fn l2_point_in_time_queries(f: Factory<'_>) {
    let (r, clock) = setup(f);
    // Valid time April 1 -> red; recorded at START.
    r.assert_fact(
        PROJECT,
        &jordan(),
        &fact("svc", "red", Some("2026-04-01T00:00:00Z")),
    )
    .unwrap();
    clock.advance(time::Duration::days(1)); // recorded 2026-04-19T20:00
    r.assert_fact(
        PROJECT,
        &jordan(),
        &fact("svc", "green", Some("2026-04-10T00:00:00+02:00")),
    )
    .unwrap();
    let q = |view| FactQuery {
        subject: Some("svc".into()),
        predicate: Some("status".into()),
        view,
    };
    let at = |t: &str| r.facts(PROJECT, &q(FactView::AsOfValid(t.into()))).unwrap();
    assert_eq!(
        at("2026-04-05T00:00:00Z")[0].fact.value,
        "red",
        "what was true on April 5"
    );
    assert_eq!(
        at("2026-04-09T22:00:00Z")[0].fact.value,
        "green",
        "boundary is inclusive at valid_from"
    );
    assert!(at("2026-03-01T00:00:00Z").is_empty());
    let believed = |t: &str| {
        r.facts(PROJECT, &q(FactView::AsOfRecorded(t.into())))
            .unwrap()
    };
    // On April 19 at 12:00 we still believed red was current (green was recorded that evening).
    assert_eq!(believed("2026-04-19T12:00:00Z")[0].fact.value, "red");
    assert_eq!(believed("2026-04-20T00:00:00Z")[0].fact.value, "green");
    assert!(
        believed("2026-04-01T00:00:00Z").is_empty(),
        "nothing recorded yet"
    );
    assert_eq!(
        token_of(r.facts(PROJECT, &q(FactView::AsOfValid("soon".into())))),
        Token::InvalidSchema
    );
}

fn l2_invalidate_counts(f: Factory<'_>) {
    let (r, clock) = setup(f);
    r.assert_fact(PROJECT, &jordan(), &fact("a", "1", None))
        .unwrap();
    clock.advance(time::Duration::seconds(1));
    assert_eq!(r.invalidate_fact(PROJECT, "a", "status").unwrap(), 1);
    assert_eq!(r.invalidate_fact(PROJECT, "a", "status").unwrap(), 0);
    assert!(r.facts(PROJECT, &FactQuery::default()).unwrap().is_empty());
    let hist = r
        .facts(
            PROJECT,
            &FactQuery {
                view: FactView::History,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        hist[0].fact.valid_to.as_deref(),
        Some("2026-04-18T20:00:01.000000Z")
    );
    assert_eq!(
        hist[0].superseded_at.as_deref(),
        Some("2026-04-18T20:00:01.000000Z")
    );
}

fn l2_concurrent_assert(f: Factory<'_>) {
    let (r, clock) = setup(f);
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let r = r.clone();
            let clock = clock.clone();
            std::thread::spawn(move || {
                for j in 0..4 {
                    clock.advance(time::Duration::milliseconds(1));
                    r.assert_fact(PROJECT, &jordan(), &fact("race", &format!("{i}-{j}"), None))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let cur = r.facts(PROJECT, &FactQuery::default()).unwrap();
    assert_eq!(cur.len(), 1, "exactly one current fact");
    let hist = r
        .facts(
            PROJECT,
            &FactQuery {
                view: FactView::History,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(hist.len(), 64);
    check_history(&hist).unwrap();
    // Recorded time follows commit order: at every instant a row was recorded, exactly one row
    // was believed current.
    for row in &hist {
        let believed = r
            .facts(
                PROJECT,
                &FactQuery {
                    view: FactView::AsOfRecorded(row.recorded_at.clone()),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(believed.len(), 1, "as recorded at {}", row.recorded_at);
    }
}

/// Recorded time never goes backwards in commit order, even for two runtimes over one store whose
/// clocks are 120 s apart; `recorded_as_of` then answers, whichever runtime is asked, what was
/// believed after the last write stamped at or before the instant.
fn l2_recorded_time_never_goes_back(f: Factory<'_>) {
    let store = f();
    let (a, clock_a) = relay(store.clone());
    let clock_b = Arc::new(FixedClock::parse(START).unwrap());
    clock_b.advance(time::Duration::seconds(-120));
    let b = Relay::new(
        store,
        clock_b.clone(),
        Arc::new(SequentialIds::new(1_776_542_400_000, 7)),
        Arc::new(SeededCallsigns::new(43)),
    );
    a.create_project(PROJECT, "Relay dev").unwrap();
    let mut commits: Vec<(String, std::collections::BTreeMap<String, String>)> = Vec::new();
    let mut state = std::collections::BTreeMap::new();
    for i in 0..12 {
        let (writer, subject) = (if i % 3 == 1 { &b } else { &a }, ["x", "y"][i % 2]);
        let value = format!("v{i}");
        let rec = writer
            .assert_fact(PROJECT, &jordan(), &fact(subject, &value, None))
            .unwrap();
        state.insert(subject.to_owned(), value);
        commits.push((rec.recorded_at.clone(), state.clone()));
        clock_a.advance(time::Duration::seconds(1));
        clock_b.advance(time::Duration::seconds(1));
    }
    for pair in commits.windows(2) {
        assert!(
            pair[0].0 <= pair[1].0,
            "recorded {} then {}",
            pair[0].0,
            pair[1].0
        );
    }
    for (t, _) in &commits {
        let want = &commits.iter().rev().find(|(r, _)| r <= t).unwrap().1;
        for r in [&a, &b] {
            let q = FactQuery {
                view: FactView::AsOfRecorded(t.clone()),
                ..Default::default()
            };
            let got: std::collections::BTreeMap<String, String> = r
                .facts(PROJECT, &q)
                .unwrap()
                .into_iter()
                .map(|x| (x.fact.subject, x.fact.value))
                .collect();
            assert_eq!(&got, want, "believed as recorded at {t}");
        }
    }
    // Invalidation by the slow runtime closes at or after the latest recorded instant.
    assert_eq!(b.invalidate_fact(PROJECT, "x", "status").unwrap(), 1);
    let history = |subject: &str| {
        let q = FactQuery {
            subject: Some(subject.into()),
            view: FactView::History,
            ..Default::default()
        };
        a.facts(PROJECT, &q).unwrap()
    };
    let last = &commits.last().unwrap().0;
    for subject in ["x", "y"] {
        let rows = history(subject);
        check_history(&rows).unwrap();
        for row in &rows {
            let closed = row.superseded_at.as_deref().unwrap_or(last.as_str());
            assert!(row.recorded_at.as_str() <= closed, "{row:?}");
        }
    }
    assert!(history("x").iter().all(|r| !r.is_current()));
    assert!(
        history("x")
            .iter()
            .any(|r| r.superseded_at.as_ref() >= Some(last))
    );
}

fn l3_status_transitions(f: Factory<'_>) {
    let (r, _) = setup(f);
    let mut n = 0;
    for from in Status::ALL {
        for to in Status::ALL {
            n += 1;
            let id = format!("pkg_t{n}");
            r.deposit(PROJECT, &jordan(), &package(&id, from.as_str()))
                .unwrap();
            let result = match to {
                Status::AwaitingReview => {
                    r.flag_for_review(PROJECT, &id, "human", Some("please"), &reviewer())
                }
                Status::Complete => r.review(PROJECT, &id, "complete", None, &reviewer()),
                Status::RevisionRequested => {
                    r.review(PROJECT, &id, "revision_requested", None, &reviewer())
                }
                Status::Draft => {
                    // No operation moves a package back to draft.
                    assert!(!from.can_become(Status::Draft));
                    continue;
                }
            };
            let before = r.pull_specific(PROJECT, &id).unwrap();
            if from.can_become(to) {
                let p = result.unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
                assert_eq!(p.package.status(), to);
                assert_eq!(before.package.status(), to);
                assert_eq!(p.verify(), Ok(()), "re-hashed");
                let rec = r.reviews(PROJECT, &id).unwrap();
                assert_eq!(rec.len(), 1);
                assert_eq!((rec[0].from_status, rec[0].to_status), (from, to));
                assert_eq!(rec[0].actor, reviewer());
            } else {
                let e = result.unwrap_err();
                assert_eq!(
                    (e.token(), e.http_status()),
                    (Token::InvalidTransition, 400),
                    "{from} -> {to}"
                );
                assert_eq!(before.package.status(), from, "unchanged");
                assert!(r.reviews(PROJECT, &id).unwrap().is_empty());
            }
        }
    }
}

fn l3_flag_review_and_awaiting_list(f: Factory<'_>) {
    let (r, _) = setup(f);
    let d = r
        .deposit(PROJECT, &jordan(), &package("pkg_r", "draft"))
        .unwrap();
    r.deposit(PROJECT, &jordan(), &package("pkg_c", "complete"))
        .unwrap();
    let flagged = r
        .flag_for_review(PROJECT, "pkg_r", "agent", Some("check numbers"), &jordan())
        .unwrap();
    assert_eq!(flagged.package.review_type(), "agent");
    assert_ne!(
        flagged.content_hash, d.stored.content_hash,
        "re-hashed on transition"
    );
    assert_eq!(
        token_of(r.flag_for_review(PROJECT, "pkg_r", "robot", None, &jordan())),
        Token::InvalidSchema
    );
    let waiting = r.awaiting_review(PROJECT).unwrap();
    assert_eq!(waiting.packages.len(), 1);
    assert_eq!(waiting.packages[0].package.package_id(), "pkg_r");
    r.review(
        PROJECT,
        "pkg_r",
        "revision_requested",
        Some("fix table 2"),
        &reviewer(),
    )
    .unwrap();
    assert!(r.awaiting_review(PROJECT).unwrap().packages.is_empty());
    r.flag_for_review(PROJECT, "pkg_r", "human", None, &jordan())
        .unwrap();
    let done = r
        .review(PROJECT, "pkg_r", "complete", Some("ok"), &casey())
        .unwrap();
    assert_eq!(done.package.status(), Status::Complete);
    let recs = r.reviews(PROJECT, "pkg_r").unwrap();
    let trail: Vec<(&str, Status)> = recs
        .iter()
        .map(|x| (x.actor.id.as_str(), x.to_status))
        .collect();
    assert_eq!(
        trail,
        [
            ("jordan", Status::AwaitingReview),
            ("rev-bot", Status::RevisionRequested),
            ("jordan", Status::AwaitingReview),
            ("casey", Status::Complete)
        ]
    );
    assert_eq!(recs[1].note.as_deref(), Some("fix table 2"));
    assert_eq!(recs[3].content_hash, done.content_hash);
    assert_eq!(
        token_of(r.review(PROJECT, "pkg_r", "revision_requested", None, &reviewer())),
        Token::InvalidTransition
    );
    assert_eq!(
        token_of(r.flag_for_review(PROJECT, "pkg_c", "human", None, &jordan())),
        Token::InvalidTransition
    );
}

/// A fact's `source_package_id` must name a package of its project; with no `asserted_by`, a
/// fact asserted by the package's own creator takes its `created_by` (session included, §7.1),
/// and one asserted by anyone else is attributed to that caller, never to the package's author.
fn l2_fact_source_package(f: Factory<'_>) {
    let (r, _) = setup(f);
    let s = r.start_session(PROJECT, &jordan()).unwrap();
    let mut p = package("pkg_src", "complete");
    p["created_by"]["session_id"] = json!(s.session_id);
    r.deposit(PROJECT, &jordan(), &p).unwrap();
    let fact = |source: &str| json!({"subject": "dash", "predicate": "owner", "value": "ana", "source_package_id": source});
    assert_eq!(
        token_of(r.assert_fact(PROJECT, &jordan(), &fact("pkg_missing"))),
        Token::PackageNotFound
    );
    assert!(
        r.facts(PROJECT, &FactQuery::default()).unwrap().is_empty(),
        "a refusal asserted nothing"
    );
    let own = r.assert_fact(PROJECT, &jordan(), &fact("pkg_src")).unwrap();
    assert_eq!(own.fact.asserted_by.id, "jordan");
    assert_eq!(
        own.fact.asserted_by.session_id.as_deref(),
        Some(s.session_id.as_str())
    );
    let other = r.assert_fact(PROJECT, &casey(), &fact("pkg_src")).unwrap();
    assert_eq!(other.fact.asserted_by.id, "casey");
    assert_eq!(other.fact.asserted_by.session_id, None);
}

fn sessions_callsign_and_provenance(f: Factory<'_>) {
    let (r, _) = setup(f);
    let s = r.start_session(PROJECT, &jordan()).unwrap();
    assert!(s.session_id.starts_with("sess_") && s.session_id.len() == 37);
    assert!(
        is_callsign(s.callsign.as_deref().unwrap()),
        "{:?}",
        s.callsign
    );
    let mut p = package("pkg_s1", "complete");
    p["created_by"]["session_id"] = json!(s.session_id);
    r.deposit(PROJECT, &jordan(), &p).unwrap();
    assert_eq!(
        r.session(&s.session_id).unwrap().packages_deposited,
        ["pkg_s1"]
    );
    assert_eq!(
        token_of(r.end_session(&s.session_id, &reviewer())),
        Token::Unauthorized
    );
    let ended = r.end_session(&s.session_id, &jordan()).unwrap();
    assert_eq!(
        ended.ended_at.as_deref(),
        Some("2026-04-18T20:00:00.000000Z")
    );
    assert_eq!(
        ended.packages_deposited,
        ["pkg_s1"],
        "the end kept the deposit"
    );
    assert_eq!(
        r.end_session(&s.session_id, &jordan()).unwrap(),
        ended,
        "ending an ended session changes nothing"
    );
    assert_eq!(token_of(r.session("sess_missing")), Token::SessionNotFound);
}

/// §6: `package_id` is unique within its project, and any such id must be accepted, so another
/// project may hold the same id. Each project's package is its own: pulled, listed, searched,
/// reviewed and tampered with apart from the other's.
fn package_ids_are_unique_per_project(f: Factory<'_>) {
    let (r, _) = setup(f);
    r.create_project("proj_b", "B").unwrap();
    let mut a = package("pkg_same", "draft");
    a["title"] = json!("the retrieval index in project A");
    let mut b = package("pkg_same", "draft");
    b["project_id"] = json!("proj_b");
    b["title"] = json!("the billing export in project B");
    let da = r.deposit(PROJECT, &jordan(), &a).unwrap();
    let db = r.deposit("proj_b", &jordan(), &b).unwrap();
    assert!(
        da.created && db.created,
        "the second project's id is accepted"
    );
    assert_ne!(da.stored.content_hash, db.stored.content_hash);
    let again = r.deposit("proj_b", &jordan(), &b).unwrap();
    assert!(!again.created, "idempotent within its own project");
    let mut changed = b.clone();
    changed["title"] = json!("changed");
    assert_eq!(
        token_of(r.deposit("proj_b", &jordan(), &changed)),
        Token::DuplicatePackageId,
        "still unique within the project"
    );
    assert_eq!(
        r.pull_specific(PROJECT, "pkg_same")
            .unwrap()
            .package
            .title(),
        "the retrieval index in project A"
    );
    assert_eq!(
        r.pull_specific("proj_b", "pkg_same")
            .unwrap()
            .package
            .title(),
        "the billing export in project B"
    );
    assert_eq!(
        r.projects_of_package("pkg_same").unwrap(),
        ["proj_b".to_owned(), PROJECT.to_owned()]
    );
    assert_eq!(r.pull_latest("proj_b", None).unwrap().packages.len(), 1);

    r.flag_for_review("proj_b", "pkg_same", "human", None, &jordan())
        .unwrap();
    assert_eq!(
        r.pull_specific(PROJECT, "pkg_same")
            .unwrap()
            .package
            .status(),
        Status::Draft,
        "a flag in one project leaves the other's package alone"
    );
    assert!(r.reviews(PROJECT, "pkg_same").unwrap().is_empty());
    assert_eq!(r.reviews("proj_b", "pkg_same").unwrap().len(), 1);
    assert_eq!(r.awaiting_review(PROJECT).unwrap().packages.len(), 0);
    assert_eq!(r.awaiting_review("proj_b").unwrap().packages.len(), 1);
    if r.store().supports_search() {
        let q = |project: &str| crate::store::SearchQuery {
            project_id: project.to_owned(),
            query: "billing export".to_owned(),
            limit: 5,
            ..Default::default()
        };
        let hits_b = r.search(&q("proj_b")).unwrap();
        assert_eq!(hits_b.hits.len(), 1, "project B finds its own package");
        assert_eq!(hits_b.hits[0].package.package.project_id(), "proj_b");
        let hits_a = r.search(&q(PROJECT)).unwrap();
        assert!(
            hits_a
                .hits
                .iter()
                .all(|h| h.package.package.project_id() == PROJECT),
            "project A never sees project B's package"
        );
    }
    let snapshot = r.store().snapshot().unwrap();
    assert_eq!(
        snapshot
            .packages
            .iter()
            .filter(|p| p.package.package_id() == "pkg_same")
            .count(),
        2
    );
    let restored = f();
    restored.restore(&snapshot).unwrap();
    assert_eq!(restored.find_package("pkg_same").unwrap().len(), 2);
    assert_eq!(
        restored.list_reviews("proj_b", "pkg_same").unwrap().len(),
        1
    );
}

fn orchestrate_digest(f: Factory<'_>) {
    let (r, _) = setup(f);
    r.create_project("proj_b", "B").unwrap();
    let mut p1 = package("pkg_o1", "complete");
    p1["content_md"] = json!("We moved the retrieval index to BM25.\n\nLatency dropped to 40 ms.");
    p1["significance"] = json!(9);
    r.deposit(PROJECT, &jordan(), &p1).unwrap();
    r.deposit(PROJECT, &jordan(), &package("pkg_o2", "draft"))
        .unwrap();
    let mut pb = package("pkg_b1", "awaiting_review");
    pb["project_id"] = json!("proj_b");
    r.deposit("proj_b", &jordan(), &pb).unwrap();
    r.assert_fact(PROJECT, &jordan(), &fact("index", "bm25", None))
        .unwrap();
    let d = r
        .orchestrate(Some(PROJECT), Some("retrieval latency"), None, None)
        .unwrap();
    assert_eq!(d.activity.packages, 1, "drafts excluded");
    assert_eq!(d.snippets[0].package_id, "pkg_o1");
    assert_eq!(d.snippets[0].field, "content_md");
    assert!(d.projects.is_empty());
    assert_eq!(d.active_facts.len(), 1);
    let g = r.orchestrate(None, None, Some(3), None).unwrap();
    assert_eq!(g.projects.len(), 2);
    assert_eq!(g.projects[0].project_id, "proj_b");
    assert_eq!(g.projects[0].awaiting_review, 1);
    assert_eq!(g.activity.packages, 2);
    assert_eq!(g.activity.by_status["awaiting_review"], 1);
    assert!(g.snippets.len() <= 3);
    assert_eq!(
        g.snippets[0].package_id, "pkg_o1",
        "most significant first without focus"
    );
    let json = serde_json::to_value(&g).unwrap();
    for k in [
        "activity",
        "active_facts",
        "open_questions",
        "snippets",
        "projects",
        "generated_at",
    ] {
        assert!(json.get(k).is_some(), "{k}");
    }
}

/// The packages of a project created at or after `now - window_days`, newest deposit first, as
/// orient and orchestrate chose them before the store had a creation-time index: every package
/// listed and verified, then filtered.
fn window_by_full_scan(r: &Relay, clock: &FixedClock, window_days: u32) -> Vec<StoredPackage> {
    use cra_wire::Clock;
    let start = clock.now() - time::Duration::days(i64::from(window_days));
    r.list(PROJECT, &PackageFilter::default())
        .unwrap()
        .packages
        .into_iter()
        .filter(|p| {
            cra_wire::clock::parse_rfc3339(p.package.created_at()).is_ok_and(|t| t >= start)
        })
        .collect()
}

/// orient and orchestrate answer from the store's creation-time index exactly what a full scan
/// of the project answers: packages in and out of the window interleaved in deposit order,
/// `created_at` out of deposit order and stated in several forms (`Z`, `+00:00`, zero to nine
/// fractional digits, one exactly at the window's start and one a nanosecond before), drafts, a
/// reviewed package, more than `ORIENT_MAX_PACKAGES` in the window, and a tampered package
/// among the newest (restored into a fresh store, which also builds the index on restore).
fn orient_window_answers_as_a_full_scan(f: Factory<'_>) {
    use cra_wire::Clock;
    let store = f();
    let (r, clock) = relay(store.clone());
    r.create_project(PROJECT, "Relay dev").unwrap();
    // START is 2026-04-18T20:00:00Z; orient runs at START + 1 h, so a 14-day window starts at
    // 2026-04-04T21:00:00Z.
    let created = [
        "2026-04-18T20:00:00Z",
        "2026-03-01T00:00:00Z",
        "2026-04-04T21:00:00Z",
        "2026-04-04T20:59:59.999999999Z",
        "2026-04-10T08:30:00.5Z",
        "2026-04-10T08:30:00+00:00",
        "2026-04-10T08:30:00.25Z",
        "2026-01-01T00:00:00.123456789Z",
        "2026-04-18T20:59:00.000001Z",
        "2026-05-01T00:00:00Z",
    ];
    for i in 0..60 {
        let status = if i % 7 == 3 { "draft" } else { "complete" };
        let mut p = package(&format!("pkg_w{i:03}"), status);
        p["created_at"] = json!(created[(i * 7) % created.len()]);
        p["open_questions"] = json!([format!("Question {}?", i % 9)]);
        r.deposit(PROJECT, &jordan(), &p).unwrap();
    }
    r.flag_for_review(PROJECT, "pkg_w003", "human", None, &jordan())
        .unwrap();
    let mut snap = store.snapshot().unwrap();
    let mut bad = snap
        .packages
        .iter()
        .rev()
        .find(|p| p.package.created_at() == "2026-04-18T20:00:00Z")
        .unwrap()
        .to_wire();
    bad["title"] = json!("Tampered");
    bad["package_id"] = json!("pkg_w_bad");
    snap.packages.push(StoredPackage::from_wire(&bad).unwrap());
    let store2 = f();
    store2.restore(&snap).unwrap();
    let (r, clock2) = relay(store2);
    clock2.set(clock.now());
    clock2.advance(time::Duration::hours(1));

    for window in [None, Some(0), Some(20), Some(60), Some(400)] {
        let days = window.unwrap_or(crate::digest::DEFAULT_WINDOW_DAYS);
        let o = r.orient(PROJECT, window).unwrap();
        let expected: Vec<StoredPackage> = window_by_full_scan(&r, &clock2, days)
            .into_iter()
            .take(crate::digest::ORIENT_MAX_PACKAGES)
            .collect();
        let wire: Vec<Value> = expected.iter().map(StoredPackage::to_wire).collect();
        assert_eq!(o.recent_packages, wire, "window {window:?}");
        let mut seen = std::collections::BTreeSet::new();
        let questions: Vec<String> = expected
            .iter()
            .flat_map(|p| p.package.open_questions())
            .map(|q| q.trim().to_owned())
            .filter(|q| seen.insert(q.to_lowercase()))
            .collect();
        assert_eq!(o.open_questions, questions, "window {window:?}");

        let d = r.orchestrate(Some(PROJECT), None, None, window).unwrap();
        let non_drafts: Vec<StoredPackage> = window_by_full_scan(&r, &clock2, days)
            .into_iter()
            .filter(|p| p.package.status() != Status::Draft)
            .collect();
        assert_eq!(d.activity.packages, non_drafts.len(), "window {window:?}");
        let mut by_status = std::collections::BTreeMap::new();
        for p in &non_drafts {
            *by_status
                .entry(p.package.status().as_str().to_owned())
                .or_insert(0usize) += 1;
        }
        assert_eq!(d.activity.by_status, by_status, "window {window:?}");
    }
    let o = r.orient(PROJECT, None).unwrap();
    assert_eq!(o.recent_packages.len(), crate::digest::ORIENT_MAX_PACKAGES);
    assert!(
        o.recent_packages
            .iter()
            .all(|p| p["package_id"] != "pkg_w_bad"),
        "the tampered package is left out"
    );
}

/// A [`RelayStore`] that counts the packages its listings hand back (what a Relay operation
/// reads of a project), passing every call to the store it wraps.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn RelayStore>,
    listed: std::sync::atomic::AtomicUsize,
}

impl CountingStore {
    /// Counts what `inner` lists.
    pub fn new(inner: Arc<dyn RelayStore>) -> Self {
        Self {
            inner,
            listed: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Packages listed since the last call.
    pub fn take_listed(&self) -> usize {
        self.listed.swap(0, std::sync::atomic::Ordering::SeqCst)
    }
}

impl RelayStore for CountingStore {
    fn create_project(&self, project: &crate::model::Project) -> Result<(), StoreError> {
        self.inner.create_project(project)
    }
    fn get_project(&self, id: &str) -> Result<Option<crate::model::Project>, StoreError> {
        self.inner.get_project(id)
    }
    fn list_projects(&self) -> Result<Vec<crate::model::Project>, StoreError> {
        self.inner.list_projects()
    }
    fn set_archived(
        &self,
        id: &str,
        archived_at: Option<&str>,
    ) -> Result<crate::model::Project, StoreError> {
        self.inner.set_archived(id, archived_at)
    }
    fn insert_package(&self, p: &StoredPackage) -> Result<InsertOutcome, StoreError> {
        self.inner.insert_package(p)
    }
    fn get_package(&self, project: &str, id: &str) -> Result<Option<StoredPackage>, StoreError> {
        self.inner.get_package(project, id)
    }
    fn find_package(&self, id: &str) -> Result<Vec<StoredPackage>, StoreError> {
        self.inner.find_package(id)
    }
    fn list_packages(
        &self,
        project: &str,
        filter: &PackageFilter,
    ) -> Result<Vec<StoredPackage>, StoreError> {
        let out = self.inner.list_packages(project, filter)?;
        self.listed
            .fetch_add(out.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(out)
    }
    fn update_package(
        &self,
        expected_hash: &str,
        updated: &StoredPackage,
        review: &crate::model::ReviewRecord,
    ) -> Result<(), StoreError> {
        self.inner.update_package(expected_hash, updated, review)
    }
    fn quarantine_package(&self, project: &str, id: &str, reason: &str) -> Result<(), StoreError> {
        self.inner.quarantine_package(project, id, reason)
    }
    fn list_reviews(
        &self,
        project: &str,
        id: &str,
    ) -> Result<Vec<crate::model::ReviewRecord>, StoreError> {
        self.inner.list_reviews(project, id)
    }
    fn assert_fact(
        &self,
        new: crate::fact::NewFact,
        now: &dyn Fn() -> String,
    ) -> Result<crate::fact::FactRecord, StoreError> {
        self.inner.assert_fact(new, now)
    }
    fn invalidate_facts(
        &self,
        project: &str,
        subject: &str,
        predicate: &str,
        now: &dyn Fn() -> String,
    ) -> Result<usize, StoreError> {
        self.inner
            .invalidate_facts(project, subject, predicate, now)
    }
    fn facts(
        &self,
        project: &str,
        query: &FactQuery,
    ) -> Result<Vec<crate::fact::FactRecord>, StoreError> {
        self.inner.facts(project, query)
    }
    fn put_session(&self, session: &crate::model::Session) -> Result<(), StoreError> {
        self.inner.put_session(session)
    }
    fn get_session(&self, id: &str) -> Result<Option<crate::model::Session>, StoreError> {
        self.inner.get_session(id)
    }
    fn end_session(
        &self,
        id: &str,
        ended_at: &str,
    ) -> Result<Option<crate::model::Session>, StoreError> {
        self.inner.end_session(id, ended_at)
    }
    fn supports_search(&self) -> bool {
        self.inner.supports_search()
    }
    fn search(
        &self,
        query: &crate::store::SearchQuery,
    ) -> Result<Vec<crate::store::SearchHit>, StoreError> {
        self.inner.search(query)
    }
    fn with_outbox(&self, outbox: Arc<dyn crate::store::Outbox>) -> Arc<dyn RelayStore> {
        self.inner.with_outbox(outbox)
    }
    fn outbox(&self) -> Result<Vec<crate::store::OutboxEntry>, StoreError> {
        self.inner.outbox()
    }
    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.inner.snapshot()
    }
    fn restore(&self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.inner.restore(snapshot)
    }
}

/// orient and orchestrate read the window, not the project: over 5 packages in the window and
/// 300 older ones deposited after them, orient's listings hand back the 5 (before the
/// creation-time index, all 305), and so do orchestrate's.
fn orient_reads_only_the_window(f: Factory<'_>) {
    let counting = Arc::new(CountingStore::new(f()));
    let (r, clock) = relay(counting.clone());
    r.create_project(PROJECT, "window").unwrap();
    for i in 0..305 {
        let mut p = package(&format!("pkg_{i:03}"), "complete");
        if i >= 5 {
            p["created_at"] = json!("2025-12-01T00:00:00Z");
        }
        r.deposit(PROJECT, &jordan(), &p).unwrap();
    }
    clock.advance(time::Duration::hours(1));
    counting.take_listed();
    let o = r.orient(PROJECT, None).unwrap();
    assert_eq!(o.recent_packages.len(), 5);
    assert_eq!(counting.take_listed(), 5, "orient listed the window only");
    let d = r.orchestrate(Some(PROJECT), None, None, None).unwrap();
    assert_eq!(d.activity.packages, 5);
    assert_eq!(
        counting.take_listed(),
        5,
        "orchestrate listed the window only"
    );
}

/// Fills a store with projects, packages (some reviewed), facts with history and a session.
pub fn populate(r: &Relay, clock: &FixedClock, packages: usize, facts: usize) {
    r.create_project(PROJECT, "Relay dev").unwrap();
    r.create_project("proj_b", "Second").unwrap();
    let s = r.start_session(PROJECT, &jordan()).unwrap();
    for i in 0..packages {
        let project = if i % 3 == 0 { "proj_b" } else { PROJECT };
        let mut p = package(
            &format!("pkg_{i:06}"),
            if i % 10 == 0 { "draft" } else { "complete" },
        );
        p["project_id"] = json!(project);
        p["x-seq"] = json!(i);
        p["tags"] = json!(["t", format!("g{}", i % 7)]);
        if i % 5 == 0 && project == PROJECT {
            p["created_by"]["session_id"] = json!(s.session_id);
        }
        r.deposit(project, &jordan(), &p).unwrap();
        if i % 10 == 0 {
            r.flag_for_review(
                project,
                &format!("pkg_{i:06}"),
                "human",
                Some("look"),
                &jordan(),
            )
            .unwrap();
        }
    }
    for i in 0..facts {
        clock.advance(time::Duration::milliseconds(3));
        let subject = format!("s{}", i % 97);
        r.assert_fact(
            PROJECT,
            &jordan(),
            &json!({"subject": subject, "predicate": "p", "value": i.to_string(), "tags": ["x"]}),
        )
        .unwrap();
    }
    r.archive("proj_b").unwrap();
}

fn export_import_round_trip(f: Factory<'_>) {
    let (r, clock) = relay(f());
    populate(&r, &clock, 120, 300);
    let snap = r.store().snapshot().unwrap();
    let first = crate::export::render(&snap).unwrap();
    let again = crate::export::render(&r.store().snapshot().unwrap()).unwrap();
    assert_eq!(
        first, again,
        "two exports of the same data are byte-identical"
    );
    assert_eq!(first.last().unwrap().0, "manifest.json");
    let parsed = crate::export::parse(&first).unwrap();
    let target = f();
    target.restore(&parsed).unwrap();
    let second = crate::export::render(&target.snapshot().unwrap()).unwrap();
    assert_eq!(
        first, second,
        "export -> import -> export is byte-identical"
    );
    let (r2, _) = relay(target.clone());
    assert_eq!(
        r2.pull_latest(PROJECT, Some(3)).unwrap().packages,
        r.pull_latest(PROJECT, Some(3)).unwrap().packages
    );
    assert!(
        target.restore(&Snapshot::default()).is_err(),
        "import needs an empty store"
    );
}

fn import_refuses_tampered_package(f: Factory<'_>) {
    let (r, clock) = relay(f());
    populate(&r, &clock, 12, 5);
    let mut files = crate::export::render(&r.store().snapshot().unwrap()).unwrap();
    let (_, body) = files
        .iter_mut()
        .find(|(n, _)| n == "packages.ndjson")
        .unwrap();
    let text = String::from_utf8(body.clone()).unwrap();
    let tampered = text.replacen("Package pkg_000004", "Package pkg_000004 (edited)", 1);
    assert_ne!(text, tampered);
    *body = tampered.into_bytes();
    let e = crate::export::parse(&files).unwrap_err();
    assert!(e.to_string().contains("pkg_000004"), "{e}");
    // A tampered fact line is caught by the manifest digest of its file.
    let mut files = crate::export::render(&r.store().snapshot().unwrap()).unwrap();
    let (_, body) = files.iter_mut().find(|(n, _)| n == "facts.ndjson").unwrap();
    *body = String::from_utf8(body.clone())
        .unwrap()
        .replacen("\"value\":\"1\"", "\"value\":\"9\"", 1)
        .into_bytes();
    let e = crate::export::parse(&files).unwrap_err();
    assert!(e.to_string().contains("facts.ndjson"), "{e}");
    let target = f();
    assert!(
        target.snapshot().unwrap().packages.is_empty(),
        "nothing imported"
    );
}

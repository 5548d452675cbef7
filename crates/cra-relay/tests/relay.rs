//! `cra-relay` integration tests: the backend-independent suite over the in-memory test store
//! (the redb and PostgreSQL backends run the same suite in `cra-store`), plus pure checks.
#![allow(clippy::unwrap_used)]

#[allow(clippy::panic, clippy::expect_used)]
#[path = "relay/fuzz_props.rs"]
mod fuzz_props;
#[path = "relay/wire.rs"]
mod wire;

use std::sync::Arc;

use cra_relay::model::Status;
use cra_relay::session::{CallsignSource, SeededCallsigns, is_callsign};
use cra_relay::store::RelayStore;
use cra_relay::store::memory::MemoryStore;
use cra_relay::testkit;

fn memory() -> Arc<dyn RelayStore> {
    Arc::new(MemoryStore::new())
}

macro_rules! suite_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let case = testkit::SUITE
                    .iter()
                    .find(|(n, _)| *n == stringify!($name))
                    .unwrap_or_else(|| panic!("no case {}", stringify!($name)));
                (case.1)(&memory);
            }
        )*

        #[test]
        fn every_suite_case_has_a_test() {
            let named = [$(stringify!($name)),*];
            for (n, _) in testkit::SUITE {
                assert!(named.contains(n), "suite case {n} is not run here");
            }
        }
    };
}

suite_tests!(
    l0_pull_specific_and_latest,
    l0_unknown_and_extension_fields_round_trip,
    l0_orient_bundle,
    l1_deposit_hashes_match_vectors,
    l1_idempotent_deposit,
    err_duplicate_package_id,
    package_ids_are_unique_per_project,
    err_invalid_schema_pointers,
    err_project_archived,
    err_identity_mismatch,
    err_package_not_found,
    err_project_not_found,
    err_search_not_supported_or_search_works,
    err_integrity_quarantine,
    l2_assert_supersedes_atomically,
    l2_point_in_time_queries,
    l2_invalidate_counts,
    l2_fact_source_package,
    l2_concurrent_assert_16_threads,
    l2_recorded_time_never_goes_back,
    l3_status_transitions,
    l3_flag_review_and_awaiting_list,
    l3_review_gates,
    sessions_callsign_and_provenance,
    orchestrate_digest,
    orient_window_answers_as_a_full_scan,
    orient_reads_only_the_window,
    export_import_round_trip,
    import_refuses_tampered_package,
);

#[test]
fn transition_table_matches_section_5_3() {
    use Status::*;
    let allowed = [
        (Draft, Complete),
        (Draft, AwaitingReview),
        (AwaitingReview, Complete),
        (AwaitingReview, RevisionRequested),
        (RevisionRequested, AwaitingReview),
        (RevisionRequested, Complete),
    ];
    for from in Status::ALL {
        for to in Status::ALL {
            assert_eq!(
                from.can_become(to),
                allowed.contains(&(from, to)),
                "{from} -> {to}"
            );
        }
    }
}

#[test]
fn callsigns_are_adjective_noun_and_seeded() {
    let a = SeededCallsigns::new(9);
    let b = SeededCallsigns::new(9);
    let seq: Vec<String> = (0..50).map(|_| a.next_callsign()).collect();
    let again: Vec<String> = (0..50).map(|_| b.next_callsign()).collect();
    assert_eq!(seq, again, "same seed, same sequence (seed 9)");
    assert!(seq.iter().all(|c| is_callsign(c)));
    let distinct: std::collections::BTreeSet<_> = seq.iter().collect();
    assert!(distinct.len() > 40, "callsigns vary: {distinct:?}");
}

#[test]
fn export_directory_writes_manifest_last_and_imports() {
    let dir = tempfile::tempdir().unwrap();
    let (r, clock) = testkit::relay(memory());
    testkit::populate(&r, &clock, 30, 40);
    cra_relay::export::export_dir(&**r.store(), dir.path()).unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 6);
    let target = memory();
    cra_relay::export::import_dir(&*target, dir.path()).unwrap();
    let a = cra_relay::export::render(&r.store().snapshot().unwrap()).unwrap();
    let b = cra_relay::export::render(&target.snapshot().unwrap()).unwrap();
    assert_eq!(a, b);
    std::fs::remove_file(dir.path().join("manifest.json")).unwrap();
    let err = cra_relay::export::import_dir(&*memory(), dir.path()).unwrap_err();
    assert!(err.to_string().contains("manifest"), "{err}");
}

#[test]
fn conformance_descriptor_declares_l3_and_what_is_missing() {
    let (r, _) = testkit::relay(memory());
    let d = serde_json::to_value(r.conformance()).unwrap();
    assert_eq!(d["protocol_version"], "0.1");
    assert_eq!(d["conformance_level"], "L3");
    for cap in [
        "hybrid_search",
        "semantic_search",
        "realtime",
        "blob_storage",
        "keyword_search",
    ] {
        assert_eq!(
            d["capabilities"][cap], false,
            "{cap} (the test store has no search)"
        );
    }
    assert_eq!(d["implementation"]["name"], "cra");
}

fn schema(name: &str) -> jsonschema::Validator {
    let path = format!("{}/../../schemas/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

/// The published package schema and the validator agree: every deposit-valid hash vector passes
/// the schema, and every invalid fixture fails it.
#[test]
fn package_schema_agrees_with_the_validator() {
    let v = schema("relay-package.schema.json");
    let vectors: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/hash-vectors.json")).unwrap();
    for case in vectors["vectors"].as_array().unwrap() {
        let p = &case["package"];
        let ours = cra_relay::validate::validate_package(p).is_ok();
        let mut without_hash = p.clone();
        without_hash.as_object_mut().unwrap().remove("content_hash");
        assert_eq!(v.is_valid(&without_hash), ours, "{}", case["id"]);
    }
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/invalid-packages.json")).unwrap();
    assert!(v.is_valid(&fx["base"]));
    for case in fx["cases"].as_array().unwrap() {
        let mut p = fx["base"].clone();
        if let Some(set) = case["set"].as_object() {
            for (k, val) in set {
                p[k] = val.clone();
            }
        }
        for k in case["remove"].as_array().into_iter().flatten() {
            p.as_object_mut().unwrap().remove(k.as_str().unwrap());
        }
        if case["name"] == "number without a double" {
            continue; // a JSON Schema cannot see double range
        }
        assert!(!v.is_valid(&p), "schema accepts {}", case["name"]);
    }
}

#[test]
fn fact_and_session_schemas_accept_what_the_domain_emits() {
    let (r, clock) = testkit::relay(memory());
    testkit::populate(&r, &clock, 20, 5);
    let snap = r.store().snapshot().unwrap();
    let facts = schema("relay-fact.schema.json");
    for f in &snap.facts {
        let v = serde_json::to_value(&f.fact).unwrap();
        assert!(facts.is_valid(&v), "{v}");
    }
    let sessions = schema("relay-session.schema.json");
    for s in &snap.sessions {
        let v = serde_json::to_value(s).unwrap();
        assert!(sessions.is_valid(&v), "{v}");
    }
    assert!(!snap.sessions.is_empty());
}

/// `created_key` is fixed-width UTC text, so its text order is the instants' order whatever form
/// `created_at` was stated in; text that is not RFC 3339 has no key.
#[test]
fn created_key_orders_as_time_whatever_the_stated_form() {
    use cra_relay::store::created_key;
    let key = |s: &str| created_key(s).unwrap();
    assert_eq!(
        key("2026-04-10T08:30:00Z"),
        "2026-04-10T08:30:00.000000000Z"
    );
    assert_eq!(
        key("2026-04-10T08:30:00+00:00"),
        key("2026-04-10T08:30:00Z")
    );
    assert_eq!(
        key("2026-04-10T08:30:00.5Z"),
        "2026-04-10T08:30:00.500000000Z"
    );
    // As stated, `.5Z` sorts before `Z` (`.` < `Z`); as keys, after.
    assert!("2026-04-10T08:30:00.5Z" < "2026-04-10T08:30:00Z");
    assert!(key("2026-04-10T08:30:00.5Z") > key("2026-04-10T08:30:00Z"));
    assert!(key("2026-04-10T08:30:00.000000001Z") > key("2026-04-10T08:30:00Z"));
    assert!(key("2026-04-10T10:30:00+02:00") == key("2026-04-10T08:30:00Z"));
    assert_eq!(created_key("yesterday"), None);
    assert_eq!(created_key(""), None);
}

fn numbered(n: usize, created_at: &str) -> cra_relay::model::StoredPackage {
    let mut p = testkit::package(&format!("pkg_{n:05}"), "complete");
    p["created_at"] = serde_json::json!(created_at);
    let hash = cra_relay::model::content_hash_of(p.as_object().unwrap()).unwrap();
    p["content_hash"] = serde_json::json!(hash);
    cra_relay::model::StoredPackage::from_wire(&p).unwrap()
}

/// `list_window` walks a project's deposits and its creation-time index in lockstep and stops
/// with whichever answers first: with the whole project in the window it reads `limit`
/// deposits, with a small window among many newer out-of-window deposits it reads about the
/// window; without a limit it never walks the deposits.
#[test]
fn list_window_reads_the_shorter_walk() {
    use cra_relay::store::{PackageFilter, list_window};
    use std::cell::Cell;
    const IN: &str = "2026-04-18T20:00:00Z";
    const OUT: &str = "2025-01-01T00:00:00Z";
    // 1,000 deposits (seq 0..1000); `created(seq)` says which are in the window.
    let run = |created: &dyn Fn(u64) -> &'static str, limit: Option<usize>| {
        let (walked, indexed) = (Cell::new(0usize), Cell::new(0usize));
        let packages: Vec<_> = (0..1000u64)
            .map(|s| numbered(s as usize, created(s)))
            .collect();
        let filter = PackageFilter {
            limit,
            created_since: cra_relay::store::created_key("2026-04-01T00:00:00Z"),
            ..PackageFilter::default()
        };
        let by_deposit = packages.iter().rev().map(|p| {
            walked.set(walked.get() + 1);
            Ok::<_, ()>(p.clone())
        });
        let window = (0..1000u64).filter(|s| created(*s) == IN).map(|s| {
            indexed.set(indexed.get() + 1);
            Ok((s, s))
        });
        let out = list_window(&filter, by_deposit, window, |s| {
            Ok(packages.get(s as usize).cloned())
        })
        .unwrap();
        let ids: Vec<String> = out
            .iter()
            .map(|p| p.package.package_id().to_owned())
            .collect();
        (ids, walked.get(), indexed.get())
    };

    let (ids, walked, indexed) = run(&|_| IN, Some(20));
    assert_eq!(ids.len(), 20);
    assert_eq!(ids[0], "pkg_00999", "newest deposit first");
    assert_eq!(
        (walked, indexed),
        (20, 19),
        "all in the window: limit deposits read"
    );

    // The window holds seqs 10..15; the 985 newer deposits are older packages.
    let small = |s: u64| if (10..15).contains(&s) { IN } else { OUT };
    let (ids, walked, indexed) = run(&small, Some(20));
    assert_eq!(
        ids,
        [
            "pkg_00014",
            "pkg_00013",
            "pkg_00012",
            "pkg_00011",
            "pkg_00010"
        ]
    );
    assert!(
        walked <= 6 && indexed == 5,
        "read the window: {walked} deposits, {indexed} keys"
    );

    let (ids, walked, indexed) = run(&small, None);
    assert_eq!(ids.len(), 5);
    assert_eq!((walked, indexed), (0, 5), "no limit: only the index");
}

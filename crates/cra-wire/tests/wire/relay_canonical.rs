//! The Relay canonical profile and content hash against every vector of
//! `fixtures/relay-content-hash.json` (copied from the shared vectors).
#![allow(clippy::unwrap_used)]

use cra_wire::canonical::relay_canonical;
use cra_wire::hash::sha256_prefixed;
use serde_json::Value;

fn vectors() -> Value {
    let text = include_str!("../fixtures/relay-content-hash.json");
    serde_json::from_str(text).unwrap()
}

fn hash_package(package: &Value) -> (String, String) {
    let mut package = package.clone();
    package.as_object_mut().unwrap().remove("content_hash");
    let canonical = relay_canonical(&package).unwrap();
    let hash = sha256_prefixed(canonical.as_bytes());
    (canonical, hash)
}

#[test]
fn every_package_vector_reproduces() {
    let v = vectors();
    let list = v["package_vectors"].as_array().unwrap();
    assert!(list.len() >= 6);
    for case in list {
        let id = case["id"].as_str().unwrap();
        let (canonical, hash) = hash_package(&case["package"]);
        assert_eq!(
            canonical,
            case["canonical"].as_str().unwrap(),
            "{id}: canonical"
        );
        assert_eq!(hash, case["content_hash"].as_str().unwrap(), "{id}: hash");
    }
}

#[test]
fn every_canonical_vector_reproduces() {
    let v = vectors();
    let list = v["canonical_vectors"].as_array().unwrap();
    assert!(list.len() >= 5);
    for case in list {
        let id = case["id"].as_str().unwrap();
        let got = relay_canonical(&case["input"]).unwrap();
        assert_eq!(got, case["canonical"].as_str().unwrap(), "{id}");
    }
}

#[test]
fn minimal_example_hash_matches_errata() {
    let v = vectors();
    let (_, hash) = hash_package(&v["package_vectors"][0]["package"]);
    assert_eq!(
        hash,
        "sha256:0efe5d06aaaaf2dc735b3f9ce7cfc1a0f7cd715491ab61d991f57be1d4c0db33"
    );
}

#[test]
fn canonical_output_is_a_fixed_point() {
    // Re-reading the canonical text and canonicalising again changes nothing.
    let v = vectors();
    for case in v["canonical_vectors"].as_array().unwrap() {
        let once = relay_canonical(&case["input"]).unwrap();
        let again = relay_canonical(&serde_json::from_str(&once).unwrap()).unwrap();
        assert_eq!(once, again, "{}", case["id"]);
    }
}

#[test]
fn huge_numbers_are_refused() {
    let v: Value = serde_json::from_str(r#"{"x":{"y":-1e309}}"#).unwrap();
    let err = relay_canonical(&v).unwrap_err();
    assert!(err.to_string().contains("/x/y"), "{err}");
}

mod properties {
    use cra_wire::canonical::relay::ecmascript_number;
    use cra_wire::canonical::relay_canonical;
    use proptest::prelude::*;
    use serde_json::Value;

    proptest! {
        // proptest prints the failing input and stores its seed in proptest-regressions/.
        #[test]
        fn numbers_round_trip_to_the_same_double(d in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO) {
            let text = ecmascript_number(d);
            let back: f64 = text.parse().unwrap();
            prop_assert!(back == d || (back == 0.0 && d == 0.0), "{d:?} -> {text}");
            // Through the JSON layer too: the canonical form is a fixed point.
            let v: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(relay_canonical(&v).unwrap(), text);
        }

        #[test]
        fn strings_survive_escaping(s in any::<String>()) {
            let canonical = relay_canonical(&Value::String(s.clone())).unwrap();
            let back: String = serde_json::from_str(&canonical).unwrap();
            prop_assert_eq!(back, s);
        }
    }
}

//! The public peer's golden case resolves to its expected resolution (`$dynamic` ignored).

use cra_carp::eval::{CountersSnapshot, ResolveOptions, resolve};
use cra_carp::validate::parse_request;
use serde_json::Value;

use crate::common::{at, atlas_set, fixture, ids, json};

/// Replaces every member whose expected value is `"$dynamic"` in `actual` by `"$dynamic"` and
/// drops `$comment`, so the two can be compared whole.
fn mask(expected: &Value, actual: &mut Value) {
    if let (Value::Object(e), Value::Object(a)) = (expected, actual) {
        for (k, ev) in e {
            if ev == "$dynamic" {
                if a.contains_key(k) {
                    a.insert(k.clone(), Value::String("$dynamic".into()));
                }
            } else if let Some(av) = a.get_mut(k) {
                mask(ev, av);
            }
        }
    }
}

#[test]
fn peer_golden_simple_resolve_matches_expected_resolution() {
    let dir = fixture("golden/simple-resolve");
    let set = atlas_set(&[dir.join("atlas")]);
    let request = parse_request(&json(&dir.join("request.json"))).unwrap();
    let now = at("2024-12-28T12:00:00Z");
    let res = resolve(
        &request,
        &set,
        &CountersSnapshot::empty(),
        now,
        &ids(),
        &ResolveOptions::default(),
    )
    .unwrap();
    let mut actual = serde_json::to_value(&res).unwrap();
    let mut expected = json(&dir.join("expected-resolution.json"));
    expected.as_object_mut().unwrap().remove("$comment");

    // The peer produced its expectation without `context/overview.md` (not shipped), so it has no
    // context block. We supply the file, so exactly one block must appear; check it by hand and
    // compare everything else with the peer's expectation.
    let blocks = actual
        .as_object_mut()
        .unwrap()
        .insert("context_blocks".into(), Value::Array(vec![]))
        .unwrap();
    let overview = std::fs::read_to_string(dir.join("atlas/context/overview.md")).unwrap();
    assert_eq!(
        blocks,
        serde_json::json!([{
            "block_id": "com.cra.conformance.simple/overview/context/overview.md",
            "source": "com.cra.conformance.simple",
            "content_type": "text/markdown",
            "content": overview,
            "priority": 100,
            "token_estimate": overview.chars().count().div_ceil(4),
        }])
    );

    mask(&expected, &mut actual);
    pretty_assertions::assert_eq!(actual, expected);
}

//! Replay re-resolves recorded requests: an unchanged atlas replays the same; a changed atlas
//! produces a reported divergence (the recorded resolution is never echoed back).

use cra_carp::eval::{CountersSnapshot, ExplainLevel, ResolveOptions, resolve};
use cra_carp::events::SessionStarted;
use cra_carp::replay::{CaseOutcome, replay, resolve_drafts, seal_session};
use cra_carp::validate::parse_request;
use cra_trace::TraceEvent;
use serde_json::json;

use crate::common::{at, atlas_set, fixture, ids};
use crate::table::{SESSION, full_request, table_atlases};

fn record(
    set: &cra_carp::index::AtlasSet,
    goals: &[(&str, &str)],
    counters: &CountersSnapshot,
) -> Vec<TraceEvent> {
    let ids = ids();
    let mut drafts = Vec::new();
    for (atlas, goal) in goals {
        let short = json!({"agent_id": "agent-1", "goal": goal, "atlas_ids": [atlas]});
        let request = parse_request(&full_request(&short, "2026-01-05T10:00:00Z")).unwrap();
        let opts = ResolveOptions {
            explain: ExplainLevel::Full,
            ..ResolveOptions::default()
        };
        let res = resolve(
            &request,
            set,
            counters,
            at("2026-01-05T10:00:00Z"),
            &ids,
            &opts,
        )
        .unwrap();
        drafts.extend(resolve_drafts(&request, &res, set.digests(), counters));
    }
    seal_session(
        SESSION,
        &SessionStarted::unattended("agent-1", "replay test"),
        "2026-01-05T10:00:00.000000Z",
        drafts,
        &ids,
    )
}

#[test]
fn recorded_traces_verify_and_replay_the_same() {
    let set = table_atlases();
    let counters = CountersSnapshot::new(
        vec![cra_carp::eval::CounterEntry {
            policy_id: "rl-logs".into(),
            scope_key: format!("session:{SESSION}"),
            value: 2,
        }],
        vec![],
    );
    let events = record(
        &set,
        &[
            ("com.example.support", "help"),
            ("com.example.ops", "deploy to production"),
        ],
        &counters,
    );
    let text: String = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    assert!(cra_trace::verify::verify_text_reference(text.as_bytes(), true).is_valid());
    let cases = replay(&events, &set);
    assert_eq!(cases.len(), 2);
    for c in &cases {
        assert_eq!(c.outcome, CaseOutcome::Same, "{c:?}");
        assert!(!c.digests_changed);
    }
    assert!(
        cases[1]
            .policies_fired
            .contains(&("com.example.ops".to_owned(), "rl-logs".to_owned()))
    );
}

#[test]
fn a_changed_atlas_is_reported_as_a_divergence() {
    let set = table_atlases();
    let events = record(
        &set,
        &[("com.example.support", "help")],
        &CountersSnapshot::empty(),
    );

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("support");
    std::fs::create_dir_all(copy.join("context")).unwrap();
    for f in [
        "atlas.json",
        "context/overview.md",
        "context/refunds.md",
        "context/escalation.md",
    ] {
        std::fs::copy(fixture("table/atlases/support").join(f), copy.join(f)).unwrap();
    }
    let text = std::fs::read_to_string(copy.join("atlas.json")).unwrap();
    let flipped = text.replacen(
        "\"policy_id\": \"deny-ticket-delete\",\n      \"type\": \"deny\"",
        "\"policy_id\": \"deny-ticket-delete\",\n      \"type\": \"allow\"",
        1,
    );
    assert_ne!(text, flipped, "the fixture layout changed; update the flip");
    std::fs::write(copy.join("atlas.json"), flipped).unwrap();
    let changed = atlas_set(&[copy]);

    let cases = replay(&events, &changed);
    assert!(cases[0].digests_changed);
    match &cases[0].outcome {
        CaseOutcome::Diverged {
            pointer,
            recorded,
            replayed,
        } => {
            // ticket.delete is now allowed: the allowed list grows at index 3.
            assert_eq!(pointer, "/allowed_actions/3/action_id");
            assert_eq!(recorded, &json!("customer.lookup"));
            assert_eq!(replayed, &json!("ticket.delete"));
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
}

#[test]
fn a_tampered_recorded_resolution_is_not_echoed() {
    let set = table_atlases();
    let mut events = record(
        &set,
        &[("com.example.ops", "check")],
        &CountersSnapshot::empty(),
    );
    let last = events.last_mut().unwrap();
    last.payload["resolution"]["decision"]["type"] = json!("deny");
    let cases = replay(&events, &set);
    assert!(
        matches!(&cases[0].outcome, CaseOutcome::Diverged { pointer, .. } if pointer == "/decision/type")
    );
}

/// The support atlas copied with its delete policy flipped from deny to allow.
fn flipped_support(dir: &std::path::Path) -> std::path::PathBuf {
    let copy = dir.join("support");
    std::fs::create_dir_all(copy.join("context")).unwrap();
    for f in [
        "atlas.json",
        "context/overview.md",
        "context/refunds.md",
        "context/escalation.md",
    ] {
        std::fs::copy(fixture("table/atlases/support").join(f), copy.join(f)).unwrap();
    }
    let text = std::fs::read_to_string(copy.join("atlas.json")).unwrap();
    let flipped = text.replacen(
        "\"policy_id\": \"deny-ticket-delete\",\n      \"type\": \"deny\"",
        "\"policy_id\": \"deny-ticket-delete\",\n      \"type\": \"allow\"",
        1,
    );
    assert_ne!(text, flipped);
    std::fs::write(copy.join("atlas.json"), flipped).unwrap();
    copy
}

#[test]
fn a_library_replays_each_request_with_its_recorded_atlas_version() {
    use cra_carp::replay::{AtlasNote, ReplayOptions, replay_library};
    let set = table_atlases();
    let events = record(
        &set,
        &[("com.example.support", "help")],
        &CountersSnapshot::empty(),
    );
    let dir = tempfile::tempdir().unwrap();
    let original = cra_atlas::load_dir(&fixture("table/atlases/support")).unwrap();
    let changed = cra_atlas::load_dir(&flipped_support(dir.path())).unwrap();
    assert_ne!(original.digest, changed.digest);
    let opts = ReplayOptions::default();

    // Both versions supplied (the changed one first): the recorded one is chosen. The other
    // table atlases were loaded when the request was recorded and are not supplied: noted.
    let cases = replay_library(&events, &[changed.clone(), original.clone()], &opts);
    assert_eq!(cases[0].outcome, CaseOutcome::Same, "{:?}", cases[0]);
    assert!(
        cases[0]
            .atlas_notes
            .iter()
            .all(|n| matches!(n, AtlasNote::NotSupplied { .. })),
        "{:?}",
        cases[0].atlas_notes
    );
    assert!(cases[0].atlas_notes.iter().any(
        |n| matches!(n, AtlasNote::NotSupplied { atlas_id, .. } if atlas_id == "com.example.ops")
    ));

    // Only the changed version: the replay runs against it, warns, and diverges; every
    // difference is listed, the first being the outcome's.
    let cases = replay_library(&events, std::slice::from_ref(&changed), &opts);
    let c = &cases[0];
    assert!(c.digests_changed);
    assert!(c.atlas_notes.contains(&AtlasNote::DigestDiffers {
        atlas_id: "com.example.support".into(),
        recorded: original.digest.clone(),
        supplied: changed.digest.clone(),
    }));
    let CaseOutcome::Diverged { pointer, .. } = &c.outcome else {
        panic!("expected a divergence: {c:?}");
    };
    assert_eq!(&c.differences[0].pointer, pointer);
    assert!(c.differences.len() > 1, "{:?}", c.differences);
    assert!(
        c.differences
            .iter()
            .any(|d| d.pointer.starts_with("/allowed_actions/")),
        "{:?}",
        c.differences
    );

    // Nothing supplied: the request cannot be re-resolved, and says why.
    let cases = replay_library(&events, &[], &opts);
    assert!(
        matches!(&cases[0].outcome, CaseOutcome::Error(m) if m.contains("re-resolving failed")),
        "{:?}",
        cases[0].outcome
    );
}

#[test]
fn an_atlas_not_loaded_at_recording_is_left_out_and_noted() {
    use cra_carp::replay::{AtlasNote, ReplayOptions, replay_library};
    // Recorded with only the support atlas loaded.
    let set = atlas_set(&[fixture("table/atlases/support")]);
    let events = record(
        &set,
        &[("com.example.support", "help")],
        &CountersSnapshot::empty(),
    );
    let support = cra_atlas::load_dir(&fixture("table/atlases/support")).unwrap();
    let ops = cra_atlas::load_dir(&fixture("table/atlases/ops")).unwrap();
    let cases = replay_library(&events, &[ops.clone(), support], &ReplayOptions::default());
    assert_eq!(cases[0].outcome, CaseOutcome::Same);
    assert_eq!(
        cases[0].atlas_notes,
        [AtlasNote::NotRecorded {
            atlas_id: "com.example.ops".into(),
            supplied: ops.digest,
        }]
    );
    assert!(
        !cases[0].digests_changed,
        "an extra atlas is not a changed one"
    );
}

#[test]
fn the_clock_is_the_recorded_resolution_instant_or_the_event_time() {
    use cra_carp::replay::{ReplayClock, ReplayOptions, replay_with};
    let set = table_atlases();
    let mut events = record(
        &set,
        &[("com.example.ops", "check")],
        &CountersSnapshot::empty(),
    );
    // The chain recorded the request a little after the resolver's instant.
    events[1].timestamp = "2026-01-05T10:00:00.250000Z".into();
    let at = |clock| {
        replay_with(&events, &set, &ReplayOptions { clock })
            .remove(0)
            .now
    };
    assert_eq!(at(ReplayClock::Resolution), "2026-01-05T10:00:00.000000Z");
    assert_eq!(at(ReplayClock::Event), "2026-01-05T10:00:00.250000Z");
    assert_eq!(replay(&events, &set)[0].outcome, CaseOutcome::Same);
}

//! The chain contract, identical on every backend: appends, reads, heads, time, session end.

use std::sync::Arc;

use cra_trace::store::{ChainStoreError, SESSION_ENDED};
use cra_wire::Token;
use serde_json::{Value, json};
use time::Duration;

use crate::backends::{backends, check_chain, draft, fixed, note, verify_stored};

#[test]
fn appends_are_contiguous_and_readable() {
    for b in backends("appends_are_contiguous_and_readable", || fixed().1) {
        let s = &*b.store;
        let first = s.append("s1", vec![note(0), note(1), note(2)]).unwrap();
        let second = s.append("s1", vec![note(3), note(4)]).unwrap();
        assert_eq!(
            first
                .iter()
                .chain(&second)
                .map(|e| e.sequence)
                .collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4],
            "{}",
            b.name
        );
        assert_eq!(second[0].previous_event_hash, first[2].event_hash);
        let all = s.read_range("s1", 0, u64::MAX).unwrap();
        assert_eq!(all, [first, second].concat(), "{}", b.name);
        check_chain("s1", &all).unwrap();
        assert_eq!(s.read_range("s1", 1, 3).unwrap(), all[1..3].to_vec());
        assert!(s.read_range("s1", 3, 3).unwrap().is_empty());
        // Ranges that start, end or cut inside one append's events.
        assert_eq!(s.read_range("s1", 2, 4).unwrap(), all[2..4].to_vec());
        assert_eq!(s.read_range("s1", 4, 9).unwrap(), all[4..].to_vec());
        assert_eq!(s.read_after("s1", Some(0), 3).unwrap(), all[1..4].to_vec());
        assert_eq!(s.read_after("s1", Some(3), 1).unwrap(), all[4..].to_vec());
        assert_eq!(s.read_after("s1", None, 2).unwrap(), all[..2].to_vec());
        assert_eq!(s.read_after("s1", Some(2), 100).unwrap(), all[3..].to_vec());
        assert!(s.read_after("s1", Some(4), 100).unwrap().is_empty());
        assert!(s.read_range("nobody", 0, 10).unwrap().is_empty());
        assert!(s.session("nobody").unwrap().is_none());
        let summary = s.session("s1").unwrap().unwrap();
        assert_eq!(summary.head.next_sequence, 5);
        assert_eq!(summary.head.head_hash, all[4].event_hash);
        assert!(!summary.ended);
        assert_eq!(verify_stored(s, "s1"), Ok(5));
    }
}

/// Invariant: a chain's summary counts the bytes of its events as sealed (what the
/// stored-bytes quota reads), batch after batch, on every backend.
#[test]
fn a_summary_counts_the_bytes_of_its_events() {
    for b in backends("a_summary_counts_the_bytes_of_its_events", || fixed().1) {
        let s = &*b.store;
        s.append("s1", vec![note(0), note(1)]).unwrap();
        s.append(
            "s1",
            vec![draft("test.payload", json!({"text": "é".repeat(40)}))],
        )
        .unwrap();
        s.append("s1", vec![draft(SESSION_ENDED, json!({}))])
            .unwrap();
        let all = s.read_range("s1", 0, u64::MAX).unwrap();
        let wire: usize = all
            .iter()
            .map(|e| serde_json::to_vec(e).unwrap().len())
            .sum();
        let summary = s.session("s1").unwrap().unwrap();
        assert_eq!(summary.bytes, wire as u64, "{}", b.name);
    }
}

#[test]
fn payloads_round_trip_exactly() {
    let text = include_str!("../fixtures/payloads.json");
    let payloads: Vec<Value> = serde_json::from_str(text).unwrap();
    for b in backends("payloads_round_trip_exactly", || fixed().1) {
        let drafts = payloads
            .iter()
            .map(|p| draft("test.payload", p.clone()))
            .collect();
        let written = b.store.append("p", drafts).unwrap();
        let read = b.store.read_range("p", 0, u64::MAX).unwrap();
        assert_eq!(read, written, "{}", b.name);
        for (e, p) in read.iter().zip(&payloads) {
            // Same text as the fixture gave (numbers keep their spelling).
            assert_eq!(
                serde_json::to_string(&e.payload).unwrap(),
                serde_json::to_string(p).unwrap()
            );
        }
        check_chain("p", &read).unwrap();
    }
}

#[test]
fn time_and_ids_come_from_the_injected_sources() {
    let mut seen: Vec<Vec<cra_trace::TraceEvent>> = Vec::new();
    for b in backends("time_and_ids_come_from_the_injected_sources", || fixed().1) {
        let events = b.store.append("det", vec![note(0), note(1)]).unwrap();
        assert_eq!(
            events[0].timestamp, "2026-03-01T12:00:00.000000Z",
            "{}",
            b.name
        );
        seen.push(events);
    }
    // Same clock, same id seed: every backend seals byte-identical events.
    assert!(seen.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn timestamps_never_go_back_within_a_chain() {
    let (clock, config) = fixed();
    let config = Arc::new(config);
    for b in backends("timestamps_never_go_back_within_a_chain", || {
        (*config).clone()
    }) {
        clock.set(time::macros::datetime!(2026-03-01 12:00 UTC));
        let a = b.store.append("t", vec![note(0)]).unwrap();
        clock.advance(Duration::hours(-1));
        let back = b.store.append("t", vec![note(1)]).unwrap();
        assert_eq!(back[0].timestamp, a[0].timestamp, "{}", b.name);
        // Another chain is not held back by this one.
        let other = b.store.append("u", vec![note(0)]).unwrap();
        assert_eq!(other[0].timestamp, "2026-03-01T11:00:00.000000Z");
        clock.advance(Duration::hours(2));
        let later = b.store.append("t", vec![note(2)]).unwrap();
        assert_eq!(later[0].timestamp, "2026-03-01T13:00:00.000000Z");
        let summary = b.store.session("t").unwrap().unwrap();
        assert_eq!(summary.first_timestamp, "2026-03-01T12:00:00.000000Z");
        assert_eq!(summary.last_timestamp, "2026-03-01T13:00:00.000000Z");
    }
}

#[test]
fn nothing_follows_session_ended() {
    for b in backends("nothing_follows_session_ended", || fixed().1) {
        let s = &*b.store;
        // session.ended in the middle of a batch: refused, nothing written.
        let err = s
            .append("e", vec![note(0), draft(SESSION_ENDED, json!({})), note(2)])
            .unwrap_err();
        assert_eq!(err.token(), Token::SessionInactive, "{}", b.name);
        assert!(s.session("e").unwrap().is_none(), "{}", b.name);
        s.append(
            "e",
            vec![note(0), draft(SESSION_ENDED, json!({"reason": "done"}))],
        )
        .unwrap();
        assert!(s.session("e").unwrap().unwrap().ended);
        let err = s.append("e", vec![note(2)]).unwrap_err();
        assert_eq!(
            err,
            ChainStoreError::SessionEnded {
                session_id: "e".into()
            }
        );
        assert_eq!(verify_stored(s, "e"), Ok(2), "{}", b.name);
    }
}

#[test]
fn bad_appends_are_refused_and_change_nothing() {
    for b in backends("bad_appends_are_refused_and_change_nothing", || fixed().1) {
        let s = &*b.store;
        assert_eq!(
            s.append("x", vec![]).unwrap_err(),
            ChainStoreError::EmptyAppend
        );
        for bad in ["", "has space", "naïve", &"x".repeat(129)] {
            let err = s.append(bad, vec![note(0)]).unwrap_err();
            assert_eq!(err.token(), Token::InvalidRequest, "{} {bad:?}", b.name);
        }
        assert!(s.sessions().unwrap().is_empty(), "{}", b.name);
    }
}

#[test]
fn sessions_are_listed_in_id_order() {
    for b in backends("sessions_are_listed_in_id_order", || fixed().1) {
        for id in ["b", "a", "C", "a-2"] {
            b.store.append(id, vec![note(0)]).unwrap();
        }
        let ids: Vec<String> = b
            .store
            .sessions()
            .unwrap()
            .into_iter()
            .map(|s| s.session_id)
            .collect();
        assert_eq!(ids, ["C", "a", "a-2", "b"], "{}", b.name);
    }
}

#[test]
fn append_then_reports_each_outcome_once() {
    for b in backends("append_then_reports_each_outcome_once", || fixed().1) {
        let s = &*b.store;
        let (tx, rx) = std::sync::mpsc::channel();
        let report = |tx: &std::sync::mpsc::Sender<_>| {
            let tx = tx.clone();
            Box::new(move |r| tx.send(r).unwrap()) as cra_trace::store::AppendDone
        };
        s.append_then("s1", vec![note(0), note(1)], report(&tx));
        s.append_then("s1", vec![], report(&tx));
        s.append_then("bad id", vec![note(2)], report(&tx));
        s.append_then("s1", vec![note(3)], report(&tx));
        drop(tx);
        let outcomes: Vec<_> = rx.iter().collect();
        assert_eq!(outcomes.len(), 4, "{}: one report per append", b.name);
        // Refusals before queueing are reported at once, so they may overtake queued appends.
        let (ok, refused): (Vec<_>, Vec<_>) = outcomes.into_iter().partition(Result::is_ok);
        let mut refused: Vec<ChainStoreError> =
            refused.into_iter().map(|r| r.unwrap_err()).collect();
        refused.sort_by_key(|e| matches!(e, ChainStoreError::InvalidSessionId { .. }));
        assert!(
            matches!(refused[0], ChainStoreError::EmptyAppend),
            "{}",
            b.name
        );
        assert!(
            matches!(refused[1], ChainStoreError::InvalidSessionId { .. }),
            "{}",
            b.name
        );
        let mut appended: Vec<cra_trace::TraceEvent> =
            ok.into_iter().flat_map(Result::unwrap).collect();
        appended.sort_by_key(|e| e.sequence);
        let stored = s.read_range("s1", 0, u64::MAX).unwrap();
        assert_eq!(
            appended, stored,
            "{}: reported events are the stored ones",
            b.name
        );
        assert_eq!(stored.len(), 3, "{}", b.name);
        check_chain("s1", &stored).unwrap();
    }
}

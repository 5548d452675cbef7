//! Concurrent appenders: one session hammered by 64 threads, many sessions at once, and appends
//! racing the removal of their own chain. Every chain must come out gap-free, unforked and
//! verifiable.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use cra_store::StoreConfig;
use cra_trace::store::ChainStoreError;

use crate::backends::{TestStore, backends, check_chain, note, verify_stored};

/// Events per appender: 500 in CI, more for the soak (`CRA_STORE_SOAK_EVENTS`).
fn events_per_appender() -> u64 {
    std::env::var("CRA_STORE_SOAK_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
}

fn hammer(store: &Arc<dyn TestStore>, sessions: &[String], threads: usize, per_thread: u64) {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            let barrier = barrier.clone();
            let session = sessions[t % sessions.len()].clone();
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    store
                        .append(&session, vec![note(t as u64 * 1_000_000 + i)])
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn sixty_four_appenders_on_one_session_make_one_chain() {
    let per = events_per_appender();
    for b in backends(
        "sixty_four_appenders_on_one_session_make_one_chain",
        StoreConfig::default,
    ) {
        let sessions = vec!["busy".to_owned()];
        hammer(&b.store, &sessions, 64, per);
        assert_eq!(verify_stored(&*b.store, "busy"), Ok(64 * per), "{}", b.name);
        // Every appender's events are all there, in its own order.
        let events = b.store.read_range("busy", 0, u64::MAX).unwrap();
        let mut next = vec![0u64; 64];
        for e in &events {
            let n: u64 = e.payload["n"].to_string().parse().unwrap();
            let (t, i) = ((n / 1_000_000) as usize, n % 1_000_000);
            assert_eq!(i, next[t], "{}: appender {t} out of order", b.name);
            next[t] += 1;
        }
    }
}

#[test]
fn many_sessions_at_once_stay_separate() {
    for b in backends("many_sessions_at_once_stay_separate", StoreConfig::default) {
        let sessions: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
        hammer(&b.store, &sessions, 32, 50);
        for s in &sessions {
            assert_eq!(verify_stored(&*b.store, s), Ok(4 * 50), "{} {s}", b.name);
        }
        assert_eq!(b.store.sessions().unwrap().len(), 8);
    }
}

/// Four threads append to a session while another removes the session's chain whenever it can
/// (retention's removal, which only removes a chain still at the head it read). An append is
/// either stored or refused as `Unavailable` ("send it again") with nothing written, and what is
/// stored at the end links from genesis and was all acknowledged: an append sealed onto a head
/// that was removed under it must never be stored.
#[test]
fn appends_racing_the_removal_of_their_chain_store_only_what_links() {
    for b in backends("appends_racing_removal", StoreConfig::default) {
        let store = b.store.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let remover = {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                // Every chain is checked before it is removed: a stored append that does not
                // link stays in the chain until then.
                let (mut removed, mut broken) = (0u32, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let events = store.read_range("s", 0, u64::MAX).unwrap();
                    if let Err(e) = check_chain("s", &events) {
                        broken.push(e);
                    }
                    if let Some(summary) = store.session("s").unwrap()
                        && store.remove_session("s", &summary.head).unwrap()
                    {
                        removed += 1;
                    }
                    std::thread::yield_now();
                }
                (removed, broken)
            })
        };
        let appenders: Vec<_> = (0..4u64)
            .map(|t| {
                let (store, name) = (store.clone(), b.name);
                std::thread::spawn(move || {
                    let mut acknowledged = Vec::new();
                    let mut refused = 0u32;
                    for i in 0..100 {
                        match store.append("s", vec![note(t * 1000 + i)]) {
                            Ok(events) => acknowledged.push(events[0].event_hash.clone()),
                            Err(ChainStoreError::Unavailable(reason)) => {
                                assert!(reason.contains("send it again"), "{name}: {reason}");
                                refused += 1;
                            }
                            Err(e) => panic!("{name}: append {i}: {e}"),
                        }
                    }
                    (acknowledged, refused)
                })
            })
            .collect();
        let mut acknowledged = HashSet::new();
        let mut refused = 0;
        for a in appenders {
            let (hashes, r) = a.join().unwrap();
            acknowledged.extend(hashes);
            refused += r;
        }
        stop.store(true, Ordering::Relaxed);
        let (removed, broken) = remover.join().unwrap();
        assert!(broken.is_empty(), "{}: {broken:?}", b.name);
        let events = store.read_range("s", 0, u64::MAX).unwrap();
        check_chain("s", &events).unwrap_or_else(|e| panic!("{}: {e}", b.name));
        for e in &events {
            assert!(
                acknowledged.contains(&e.event_hash),
                "{}: event {} was stored but never acknowledged",
                b.name,
                e.sequence
            );
        }
        println!(
            "{}: {removed} removals, {refused} refused appends, {} events left",
            b.name,
            events.len()
        );
    }
}

//! Concurrent appenders: one session hammered by 64 threads, and many sessions at once. Every
//! chain must come out gap-free, unforked and verifiable.

use std::sync::{Arc, Barrier};

use cra_store::StoreConfig;

use crate::backends::{TestStore, backends, note, verify_stored};

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

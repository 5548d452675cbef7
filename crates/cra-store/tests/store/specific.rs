//! Checks particular to one backend: redb's single-process lock, reopening and stored bytes;
//! PostgreSQL's migrations and several replicas sharing a schema.

use std::sync::Arc;

use cra_store::pg::{check_schema_name, embedded_migrations};
use cra_store::testing::{SkewedClock, TestSchema, postgres_url};
use cra_store::{BackendError, PgStore, RedbStore, StoreConfig};
use cra_trace::store::ChainStore;
use redb::TableDefinition;

use serde_json::json;

use crate::backends::{draft, fixed, note, verify_stored};

/// redb's TRACE events table, read and written directly by the checks of stored bytes.
const EVENTS: TableDefinition<'static, (&str, u64), &[u8]> = TableDefinition::new("trace_events");

#[test]
fn redb_refuses_a_second_opener_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let first = RedbStore::open(dir.path()).unwrap();
    let err = RedbStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, BackendError::InUse { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    assert!(msg.contains("CRA_URL"), "{msg}");
    drop(first);
    // Once closed, the directory opens again with its data.
    RedbStore::open(dir.path()).unwrap();
}

#[test]
fn redb_keeps_chains_across_reopen_and_stores_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let written = {
        let store = RedbStore::open_with(dir.path(), fixed().1).unwrap();
        store.append("r", vec![note(0), note(1)]).unwrap()
    };
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(store.read_range("r", 0, 10).unwrap(), written);
    let more = store.append("r", vec![note(2)]).unwrap();
    assert_eq!(more[0].sequence, 2);
    assert_eq!(verify_stored(&store, "r"), Ok(3));
    let txn = store.handle().begin_read().unwrap();
    let table = txn.open_table(EVENTS).unwrap();
    // One record per append: its events' wire JSON, one per line.
    let line = |e| serde_json::to_vec(e).unwrap();
    let raw = table.get(("r", 0)).unwrap().unwrap();
    assert_eq!(
        raw.value(),
        [line(&written[0]), line(&written[1])]
            .join(&b'\n')
            .as_slice()
    );
    assert!(table.get(("r", 1)).unwrap().is_none());
    let raw = table.get(("r", 2)).unwrap().unwrap();
    assert_eq!(raw.value(), line(&more[0]).as_slice());
}

/// The page cache is a size, not a place data lives: with none at all every read goes to the
/// file, and chains, reopening and verification behave the same.
#[test]
fn redb_without_a_page_cache_reads_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let config = fixed().1.with_redb_cache_bytes(0);
    let written = {
        let store = RedbStore::open_with(dir.path(), config.clone()).unwrap();
        let mut written = Vec::new();
        for i in 0..20 {
            written.extend(
                store
                    .append("c", vec![note(2 * i), note(2 * i + 1)])
                    .unwrap(),
            );
        }
        assert_eq!(store.read_range("c", 0, 100).unwrap(), written);
        written
    };
    let store = RedbStore::open_with(dir.path(), config).unwrap();
    assert_eq!(store.read_after("c", Some(9), 5).unwrap(), written[10..15]);
    assert_eq!(verify_stored(&store, "c"), Ok(40));
}

/// Appends three events to chain `old` of `store`, then stores them again as an earlier
/// version did, one event per key, each as the JSON text `edit(sequence, text)` makes of it.
fn one_event_per_key(
    store: &RedbStore,
    edit: impl Fn(u64, String) -> String,
) -> Vec<cra_trace::TraceEvent> {
    let written = store
        .append("old", vec![note(0), note(1), note(2)])
        .unwrap();
    let txn = store.handle().begin_write().unwrap();
    {
        let mut table = txn.open_table(EVENTS).unwrap();
        table.remove(("old", 0)).unwrap().unwrap();
        for e in &written {
            let text = edit(e.sequence, serde_json::to_string(e).unwrap());
            table.insert(("old", e.sequence), text.as_bytes()).unwrap();
        }
    }
    txn.commit().unwrap();
    written
}

/// A database written with one event per key (before an append became one record) reads the
/// same: such a key is a record of one event.
#[test]
fn redb_reads_chains_stored_one_event_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open_with(dir.path(), fixed().1).unwrap();
    let written = one_event_per_key(&store, |_, text| text);
    assert_eq!(store.read_range("old", 0, 10).unwrap(), written);
    assert_eq!(
        store.read_range("old", 1, 2).unwrap(),
        written[1..2].to_vec()
    );
    assert_eq!(
        store.read_after("old", Some(0), 5).unwrap(),
        written[1..].to_vec()
    );
    let more = store.append("old", vec![note(3), note(4)]).unwrap();
    assert_eq!(more[0].sequence, 3);
    assert_eq!(
        store.read_range("old", 2, 5).unwrap(),
        [&written[2..], &more[..]].concat()
    );
    assert_eq!(verify_stored(&store, "old"), Ok(5));
}

/// Issue 29, item 4, on redb: `read_page` reads a chain up to an event stored in a form that no
/// longer parses (a number an earlier version stored as `Infinity`) and names that event, rather
/// than failing the page; a range after it reads as before.
#[test]
fn redb_pages_stop_before_an_unreadable_event_and_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open_with(dir.path(), fixed().1).unwrap();
    let written = one_event_per_key(&store, |sequence, text| match sequence {
        1 => text.replacen("\"payload\":{", "\"payload\":{\"x\":Infinity,", 1),
        _ => text,
    });
    let page = cra_trace::store::read_page(&store, "old", 0, 10).unwrap();
    assert_eq!(page.events, written[..1].to_vec());
    let why = page.unreadable.expect("the unreadable event is named");
    assert!(
        matches!(
            why,
            cra_trace::store::ChainStoreError::Corrupt { sequence: 1, .. }
        ),
        "{why}"
    );
    let rest = cra_trace::store::read_page(&store, "old", 2, 10).unwrap();
    assert_eq!(rest.events, written[2..].to_vec());
    assert!(rest.unreadable.is_none());
}

/// A large append's record is stored compressed and reads back as the exact events; a large
/// record stored as plain text (as before records were compressed) reads the same, and chains
/// go on from either.
#[test]
fn redb_compresses_large_records_and_reads_plain_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open_with(dir.path(), fixed().1).unwrap();
    let big = |n: u64| {
        crate::backends::draft(
            "test.big",
            serde_json::json!({ "n": n, "text": "governed context, \u{e9}t\u{e9} \n".repeat(80) }),
        )
    };
    let written = store.append("big", vec![big(0), big(1), big(2)]).unwrap();
    let plain = [&written[0], &written[1], &written[2]]
        .map(|e| serde_json::to_vec(e).unwrap())
        .join(&b'\n');
    {
        let txn = store.handle().begin_read().unwrap();
        let table = txn.open_table(EVENTS).unwrap();
        let raw = table.get(("big", 0)).unwrap().unwrap();
        assert!(
            raw.value().len() * 4 < plain.len(),
            "{} bytes",
            raw.value().len()
        );
        assert_eq!(
            cra_store::redb::record::unpack(raw.value())
                .unwrap()
                .as_ref(),
            plain.as_slice()
        );
    }
    assert_eq!(store.read_range("big", 0, 10).unwrap(), written);
    assert_eq!(store.read_after("big", Some(0), 1).unwrap(), written[1..2]);

    let txn = store.handle().begin_write().unwrap();
    {
        let mut table = txn.open_table(EVENTS).unwrap();
        table.insert(("big", 0), plain.as_slice()).unwrap();
    }
    txn.commit().unwrap();
    assert_eq!(store.read_range("big", 1, 3).unwrap(), written[1..]);
    store.append("big", vec![big(3)]).unwrap();
    assert_eq!(verify_stored(&store, "big"), Ok(4));
}

#[test]
fn redb_data_dir_that_cannot_be_created_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let err = RedbStore::open(file.join("sub")).unwrap_err();
    assert!(matches!(err, BackendError::DataDir { .. }), "{err:?}");
}

#[test]
fn schema_names_are_checked() {
    for good in ["cra", "_x", "t_1"] {
        assert!(check_schema_name(good).is_ok(), "{good}");
    }
    for bad in ["", "1a", "A", "a-b", "a;drop", &"a".repeat(64)] {
        assert!(check_schema_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn postgres_applies_embedded_migrations_once() {
    let Some(url) = postgres_url("postgres_applies_embedded_migrations_once") else {
        return;
    };
    let schema = TestSchema::new(&url, "migrations");
    let store = schema.store(StoreConfig::default()).unwrap();
    let applied = store.applied_migrations().unwrap();
    let embedded: Vec<(u32, String)> = embedded_migrations()
        .into_iter()
        .map(|(v, n)| (v, n.to_owned()))
        .collect();
    assert_eq!(applied, embedded);
    assert!(embedded.iter().any(|(_, n)| n == "trace"));
    // A second start (another replica) applies nothing new and keeps the data.
    store.append("m", vec![note(0)]).unwrap();
    let again = schema.store(StoreConfig::default()).unwrap();
    assert_eq!(again.applied_migrations().unwrap(), embedded);
    assert_eq!(verify_stored(&again, "m"), Ok(1));
}

/// Migration 0016: every large body column compresses new values with LZ4 on a server built
/// with it (pglz cost a fifth of PostgreSQL's CPU under resolves, `bench/NOTES.md`), and the
/// migration is skipped, not failed, on one without.
#[test]
fn postgres_large_bodies_are_compressed_with_lz4_where_the_server_has_it() {
    let Some(url) =
        postgres_url("postgres_large_bodies_are_compressed_with_lz4_where_the_server_has_it")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "lz4");
    let store = schema.store(StoreConfig::default()).unwrap();
    let mut client = store.client().unwrap();
    let has_lz4: bool = client
        .query_one(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'",
            &[],
        )
        .unwrap()
        .get(0);
    let tables = [
        "trace_events",
        "carp_resolutions",
        "carp_executions",
        "carp_approvals",
        "relay_packages",
        "relay_facts",
        "relay_outbox",
    ];
    for table in tables {
        let method: String = client
            .query_one(
                "SELECT attcompression::text FROM pg_attribute
                 WHERE attrelid = $1::text::regclass AND attname = 'body'",
                &[&table],
            )
            .unwrap()
            .get(0);
        let want = if has_lz4 { "l" } else { "" };
        assert_eq!(method, want, "{table}.body (lz4 available: {has_lz4})");
    }
}

#[test]
fn postgres_replicas_sharing_a_schema_keep_one_chain() {
    let Some(url) = postgres_url("postgres_replicas_sharing_a_schema_keep_one_chain") else {
        return;
    };
    let schema = TestSchema::new(&url, "replicas");
    let replicas: Vec<Arc<dyn ChainStore>> = (0..3)
        .map(|_| Arc::new(schema.store(StoreConfig::default()).unwrap()) as Arc<dyn ChainStore>)
        .collect();
    let handles: Vec<_> = (0..12)
        .map(|t| {
            let store = replicas[t % 3].clone();
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    store.append("shared", vec![note(i), note(i)]).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let check = schema.store(StoreConfig::default()).unwrap();
    assert_eq!(verify_stored(&check, "shared"), Ok(12 * 40 * 2));
}

/// The database's clock now, read directly.
fn database_now(store: &PgStore) -> time::OffsetDateTime {
    let mut client = store.client().unwrap();
    let micros: i64 = client
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8",
            &[],
        )
        .unwrap()
        .get(0);
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000).unwrap()
}

/// Invariant (`pg/clock.rs`): replicas whose own clocks are an hour ahead and an hour behind
/// stamp one chain's events with the database's time, so neither pushes the chain's times away
/// from the others' (without it, the chain's clamp would keep every later event an hour ahead).
#[test]
fn postgres_replicas_with_skewed_clocks_record_the_database_s_time() {
    use cra_store::pg::clock::DatabaseClock;
    let Some(url) = postgres_url("postgres_replicas_with_skewed_clocks_record_the_database_s_time")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "clock");
    let replicas: Vec<PgStore> = [time::Duration::hours(1), time::Duration::hours(-1)]
        .into_iter()
        .enumerate()
        .map(|(n, skew)| {
            let clock = Arc::new(DatabaseClock::new(Arc::new(SkewedClock(skew))));
            let ids = Arc::new(cra_wire::SequentialIds::new(1_772_366_400_000, n as u64));
            let store = schema.store(StoreConfig::new(clock.clone(), ids)).unwrap();
            let sample = clock.sync(&store).unwrap();
            assert!(sample.taken);
            let off = (sample.offset + skew).abs();
            assert!(
                off < time::Duration::seconds(1),
                "offset {} for skew {skew}",
                sample.offset
            );
            store
        })
        .collect();
    let before = database_now(&replicas[0]);
    for i in 0..6u64 {
        replicas[(i % 2) as usize]
            .append("skewed", vec![note(i)])
            .unwrap();
    }
    let after = database_now(&replicas[1]);
    let events = replicas[0].read_after("skewed", None, 100).unwrap();
    assert_eq!(events.len(), 6);
    let slack = time::Duration::seconds(1);
    for e in &events {
        let t = cra_wire::clock::parse_rfc3339(&e.timestamp).unwrap();
        assert!(
            t >= before - slack && t <= after + slack,
            "event {} at {} outside the database's [{before}, {after}]",
            e.sequence,
            e.timestamp
        );
    }
}

/// Invariant (`pg/feed.rs`): every replica sharing a schema hears of every committed append
/// exactly once, each session's ranges in sequence order and contiguous, and can tell its own
/// appends by their origin. A refused append is never announced.
#[test]
fn postgres_replicas_hear_every_committed_append_once_in_order() {
    use cra_store::pg::feed::{FeedEvent, Notice};
    let Some(url) = postgres_url("postgres_replicas_hear_every_committed_append_once_in_order")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "feed");
    let replicas: Vec<PgStore> = (0..3)
        .map(|_| schema.store(StoreConfig::default()).unwrap())
        .collect();
    let (tx, rx) = std::sync::mpsc::channel::<Notice>();
    let listener = replicas[0]
        .listen(move |e| match e {
            FeedEvent::Notice(n) => {
                let _ = tx.send(n);
            }
            FeedEvent::Lost { reason } => panic!("the feed broke: {reason}"),
            FeedEvent::Atlases { .. } => panic!("no atlas catalog change was made"),
        })
        .unwrap();
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let store = replicas[t % 3].clone();
            std::thread::spawn(move || {
                for i in 0..20u64 {
                    let session = format!("feed-{}", i % 2);
                    store.append(&session, vec![note(i), note(i)]).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    replicas[1].append("feed-end", vec![note(0)]).unwrap();
    replicas[1]
        .append(
            "feed-end",
            vec![draft(cra_trace::store::SESSION_ENDED, json!({}))],
        )
        .unwrap();
    // Refused: the chain has ended. Nothing may be announced for it.
    assert!(replicas[2].append("feed-end", vec![note(1)]).is_err());
    replicas[2].append("feed-last", vec![note(0)]).unwrap();

    let mut next: std::collections::HashMap<String, u64> = Default::default();
    let mut origins = std::collections::HashSet::new();
    let mut ended = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !next.contains_key("feed-last") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let notice = rx
            .recv_timeout(left)
            .expect("every append is heard within 10 s");
        origins.insert(notice.origin);
        for a in notice.appended {
            let at = next.entry(a.session_id.clone()).or_insert(0);
            assert_eq!(a.from, *at, "{}: contiguous, in order, once", a.session_id);
            *at = a.to;
            if a.ended {
                ended.push(a.session_id);
            }
        }
    }
    drop(listener);
    assert_eq!(next["feed-0"], 6 * 10 * 2);
    assert_eq!(next["feed-1"], 6 * 10 * 2);
    assert_eq!(next["feed-end"], 2);
    assert_eq!(ended, vec!["feed-end".to_owned()]);
    let all: std::collections::HashSet<u64> = replicas.iter().map(PgStore::origin).collect();
    assert_eq!(all.len(), 3, "each replica has its own origin");
    assert_eq!(
        origins, all,
        "the listener heard every replica, itself included"
    );
}

/// Invariant (`pg/feed.rs`): when the listening connection breaks, the listener reconnects and
/// says that notifications may have been lost, then hears appends again.
#[test]
fn postgres_feed_reports_a_broken_connection_and_listens_again() {
    use cra_store::pg::feed::{FeedEvent, channel};
    let Some(url) = postgres_url("postgres_feed_reports_a_broken_connection_and_listens_again")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "feedlost");
    let store = schema.store(StoreConfig::default()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<FeedEvent>();
    let _listener = store
        .listen(move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
    let ten = std::time::Duration::from_secs(10);
    let mut admin = store.client().unwrap();
    let killed = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1",
            &[&format!("LISTEN \"{}\"", channel(schema.name()))],
        )
        .unwrap();
    drop(admin);
    assert_eq!(killed.len(), 1, "one listening connection");
    match rx.recv_timeout(ten).expect("the break is reported") {
        FeedEvent::Lost { reason } => assert!(reason.contains("broke"), "{reason}"),
        other => panic!("expected Lost, got {other:?}"),
    }
    store.append("after", vec![note(0)]).unwrap();
    match rx.recv_timeout(ten).expect("heard again") {
        FeedEvent::Notice(n) => assert_eq!(n.appended[0].session_id, "after"),
        other => panic!("expected a notice, got {other:?}"),
    }
}

/// Invariant (`pg/leader.rs`): of the replicas bidding on one schema, exactly one leads; when
/// the leader's bid ends (its connection closes, as when its process dies), another takes over
/// at once, without polling.
#[test]
fn postgres_one_replica_leads_and_another_takes_over_when_it_goes() {
    let Some(url) = postgres_url("postgres_one_replica_leads_and_another_takes_over_when_it_goes")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "leader");
    let store = schema.store(StoreConfig::default()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, bool)>();
    let mut bids: Vec<Option<cra_store::pg::leader::Leadership>> = (0..3)
        .map(|i| {
            let tx = tx.clone();
            Some(
                store
                    .lead("periodic", move |l| {
                        let _ = tx.send((i, l));
                    })
                    .unwrap(),
            )
        })
        .collect();
    // The first bid found the lock free and leads before `lead` returned; no other does.
    assert_eq!(rx.try_recv(), Ok((0, true)));
    assert!(rx.try_recv().is_err());
    // Another schema's bid is not in this election.
    let other = TestSchema::new(&url, "leader2");
    let (otx, orx) = std::sync::mpsc::channel::<bool>();
    let _other = other
        .store(StoreConfig::default())
        .unwrap()
        .lead("periodic", move |l| {
            let _ = otx.send(l);
        })
        .unwrap();
    assert_eq!(orx.try_recv(), Ok(true));

    // A leader that stops says so before its connection (and the lock) goes.
    bids[0] = None;
    assert_eq!(rx.try_recv(), Ok((0, false)));
    let ten = std::time::Duration::from_secs(10);
    let (next, leading) = rx.recv_timeout(ten).expect("a new leader within 10 s");
    assert!(leading && next != 0, "{next} {leading}");
    bids[next] = None;
    assert_eq!(rx.try_recv(), Ok((next, false)));
    let (last, leading) = rx.recv_timeout(ten).expect("the last bid leads");
    assert!(leading && last != 0 && last != next, "{last} {leading}");
}

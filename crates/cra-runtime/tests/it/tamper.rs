//! Tamper evidence: chains recorded by a real server are modified directly in the store (the
//! redb file once the server has stopped; PostgreSQL rows with `UPDATE` / `DELETE`), and every
//! verifier must name the first affected sequence with the right code: the server's
//! `POST /v1/traces/{id}/verify`, the streaming verifier behind `cra trace verify`
//! (`cra_trace::verify_reader`) on the chain exported as NDJSON, and the Python Appendix B code
//! (`tools/appendix_b.py`).
//!
//! Two cases document what the chain does *not* catch on its own (specs/SECURITY.md): a rewrite
//! of a whole suffix with every hash recomputed (and the head moved) verifies, and so does an
//! export of a chain whose last events were deleted; the server's verification still reports
//! that one, comparing the chain with the head the store keeps beside it. The transparency log
//! catches the rewrite: an auditor who saw an earlier signed checkpoint finds the rebuilt log
//! inconsistent with it, on both backends (issue 26).

use cra_trace::TraceEvent;
use serde_json::{Value, json};

use crate::support::*;

/// One direct modification of a stored chain (events are addressed by their place in the chain:
/// a PostgreSQL row's key; in redb, a record's key plus the line's index in it).
#[derive(Debug, Clone, Copy)]
enum Edit {
    /// Change the payload, keep the recorded hash.
    Payload(u64),
    /// Replace the recorded event_hash.
    EventHash(u64),
    /// Change the timestamp, keep the hash.
    Timestamp(u64),
    /// Replace the link to the previous event.
    PreviousHash(u64),
    /// Write another number in the event's `sequence`.
    Sequence(u64),
    /// Delete the event.
    Delete(u64),
    /// Swap the bodies of two neighbouring events.
    Swap(u64),
    /// Make the stored body unreadable.
    Garbage(u64),
    /// Delete the last event (tail truncation).
    DeleteLast,
    /// Change the payload at this sequence and recompute every hash from there to the head.
    Rewrite(u64),
}

/// What the verifiers must say: the first affected sequence and the code (`unreadable`: a stored
/// event the store cannot decode, which verify reports as `malformed_event`), or valid.
fn expected(edit: Edit) -> Option<(u64, &'static str)> {
    match edit {
        Edit::Payload(k) | Edit::EventHash(k) | Edit::Timestamp(k) => Some((k, "hash_mismatch")),
        Edit::PreviousHash(0) => Some((0, "invalid_genesis")),
        Edit::PreviousHash(k) => Some((k, "chain_broken")),
        Edit::Sequence(k) | Edit::Delete(k) | Edit::Swap(k) => Some((k, "sequence_gap")),
        Edit::Garbage(k) => Some((k, "unreadable")),
        Edit::DeleteLast | Edit::Rewrite(_) => None,
    }
}

const EDITS: [Edit; 11] = [
    Edit::Payload(3),
    Edit::EventHash(2),
    Edit::Timestamp(4),
    Edit::PreviousHash(3),
    Edit::PreviousHash(0),
    Edit::Sequence(3),
    Edit::Delete(2),
    Edit::Swap(3),
    Edit::Garbage(3),
    Edit::DeleteLast,
    Edit::Rewrite(2),
];

/// The store under test, edited directly (blocking code: run it off the async threads).
trait RawStore {
    fn get(&mut self, sid: &str, seq: u64) -> Vec<u8>;
    fn put(&mut self, sid: &str, seq: u64, body: &[u8]);
    fn delete(&mut self, sid: &str, seq: u64);
    /// The stored head: events in the chain.
    fn len(&mut self, sid: &str) -> u64;
    /// Moves the stored head's hash (what a consistent rewrite also has to do).
    fn set_head_hash(&mut self, sid: &str, hash: &str);
}

fn event(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn apply(store: &mut dyn RawStore, sid: &str, edit: Edit) {
    match edit {
        Edit::Payload(k) => {
            let mut e = event(&store.get(sid, k));
            e["payload"]["tampered"] = json!(true);
            store.put(sid, k, &bytes(&e));
        }
        Edit::EventHash(k) => {
            let mut e = event(&store.get(sid, k));
            e["event_hash"] = json!("ab".repeat(32));
            store.put(sid, k, &bytes(&e));
        }
        Edit::Timestamp(k) => {
            let mut e = event(&store.get(sid, k));
            e["timestamp"] = json!("2026-03-02T09:00:00.000000Z");
            store.put(sid, k, &bytes(&e));
        }
        Edit::PreviousHash(k) => {
            let mut e = event(&store.get(sid, k));
            e["previous_event_hash"] = json!("cd".repeat(32));
            store.put(sid, k, &bytes(&e));
        }
        Edit::Sequence(k) => {
            let mut e = event(&store.get(sid, k));
            e["sequence"] = json!(k + 7);
            store.put(sid, k, &bytes(&e));
        }
        Edit::Delete(k) => store.delete(sid, k),
        Edit::Swap(k) => {
            let (a, b) = (store.get(sid, k), store.get(sid, k + 1));
            store.put(sid, k, &b);
            store.put(sid, k + 1, &a);
        }
        Edit::Garbage(k) => store.put(sid, k, b"{\"not\": \"an event\""),
        Edit::DeleteLast => {
            let n = store.len(sid);
            store.delete(sid, n - 1);
        }
        Edit::Rewrite(k) => {
            let n = store.len(sid);
            let mut previous: Option<String> = None;
            for seq in k..n {
                let mut e: TraceEvent = serde_json::from_slice(&store.get(sid, seq)).unwrap();
                if seq == k {
                    e.payload["tampered"] = json!(true);
                }
                if let Some(p) = previous.take() {
                    e.previous_event_hash = p;
                }
                e.event_hash = cra_trace::compute_event_hash(&e);
                previous = Some(e.event_hash.clone());
                store.put(sid, seq, &serde_json::to_vec(&e).unwrap());
            }
            store.set_head_hash(sid, &previous.unwrap());
        }
    }
}

/// The redb file of a stopped server, opened directly.
struct RedbRaw(redb::Database);

const EVENTS: redb::TableDefinition<'static, (&str, u64), &[u8]> =
    redb::TableDefinition::new("trace_events");
const HEADS: redb::TableDefinition<'static, &str, &[u8]> =
    redb::TableDefinition::new("trace_heads");

impl RedbRaw {
    /// The record holding `seq` (one append's events, one per line, keyed by the first one's
    /// sequence, compressed when large): its key and its lines.
    fn record(&mut self, sid: &str, seq: u64) -> (u64, Vec<Vec<u8>>) {
        use redb::ReadableDatabase;
        let txn = self.0.begin_read().unwrap();
        let t = txn.open_table(EVENTS).unwrap();
        let (key, value) = t
            .range((sid, 0)..=(sid, seq))
            .unwrap()
            .next_back()
            .unwrap()
            .unwrap();
        let text = cra_store::redb::record::unpack(value.value()).unwrap();
        let lines = text.split(|b| *b == b'\n').map(<[u8]>::to_vec);
        (key.value().1, lines.collect())
    }

    /// Writes the record `first` back with `lines` (removes it when none is left).
    fn write_record(&mut self, sid: &str, first: u64, lines: &[Vec<u8>]) {
        let txn = self.0.begin_write().unwrap();
        {
            let mut t = txn.open_table(EVENTS).unwrap();
            if lines.is_empty() {
                t.remove((sid, first)).unwrap();
            } else {
                let stored = cra_store::redb::record::pack(lines.join(&b'\n'));
                t.insert((sid, first), stored.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
}

impl RawStore for RedbRaw {
    fn get(&mut self, sid: &str, seq: u64) -> Vec<u8> {
        let (first, lines) = self.record(sid, seq);
        lines[(seq - first) as usize].clone()
    }
    fn put(&mut self, sid: &str, seq: u64, body: &[u8]) {
        let (first, mut lines) = self.record(sid, seq);
        lines[(seq - first) as usize] = body.to_vec();
        self.write_record(sid, first, &lines);
    }
    fn delete(&mut self, sid: &str, seq: u64) {
        let (first, mut lines) = self.record(sid, seq);
        lines.remove((seq - first) as usize);
        self.write_record(sid, first, &lines);
    }
    fn len(&mut self, sid: &str) -> u64 {
        use redb::ReadableDatabase;
        let txn = self.0.begin_read().unwrap();
        let t = txn.open_table(HEADS).unwrap();
        let head = event(t.get(sid).unwrap().unwrap().value());
        head["next_sequence"].as_u64().unwrap()
    }
    fn set_head_hash(&mut self, sid: &str, hash: &str) {
        use redb::ReadableTable;
        let txn = self.0.begin_write().unwrap();
        {
            let mut t = txn.open_table(HEADS).unwrap();
            let mut head = event(t.get(sid).unwrap().unwrap().value());
            head["head_hash"] = json!(hash);
            t.insert(sid, bytes(&head).as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
}

/// A PostgreSQL schema of a running server, edited with plain SQL.
struct PgRaw(postgres::Client);

impl RawStore for PgRaw {
    fn get(&mut self, sid: &str, seq: u64) -> Vec<u8> {
        let row = self
            .0
            .query_one(
                "SELECT body FROM trace_events WHERE session_id = $1 AND sequence = $2",
                &[&sid, &(seq as i64)],
            )
            .unwrap();
        row.get::<_, String>(0).into_bytes()
    }
    fn put(&mut self, sid: &str, seq: u64, body: &[u8]) {
        let n = self
            .0
            .execute(
                "UPDATE trace_events SET body = $3 WHERE session_id = $1 AND sequence = $2",
                &[
                    &sid,
                    &(seq as i64),
                    &String::from_utf8_lossy(body).into_owned(),
                ],
            )
            .unwrap();
        assert_eq!(n, 1);
    }
    fn delete(&mut self, sid: &str, seq: u64) {
        let n = self
            .0
            .execute(
                "DELETE FROM trace_events WHERE session_id = $1 AND sequence = $2",
                &[&sid, &(seq as i64)],
            )
            .unwrap();
        assert_eq!(n, 1);
    }
    fn len(&mut self, sid: &str) -> u64 {
        let row = self
            .0
            .query_one(
                "SELECT next_sequence FROM trace_heads WHERE session_id = $1",
                &[&sid],
            )
            .unwrap();
        row.get::<_, i64>(0) as u64
    }
    fn set_head_hash(&mut self, sid: &str, hash: &str) {
        self.0
            .execute(
                "UPDATE trace_heads SET head_hash = $2 WHERE session_id = $1",
                &[&sid, &hash],
            )
            .unwrap();
    }
}

/// One session per edit, each with a few resolves (a dozen events or more).
async fn record_chains(s: &TestServer) -> Vec<String> {
    let mut sids = Vec::new();
    for _ in EDITS {
        let sid = s.open_session(MAINT, "maintainer-bot").await;
        for caps in [&["repo-read"][..], &["repo-read", "contribute"][..]] {
            let (st, body) = s
                .post(
                    Some(MAINT),
                    "/v1/resolve",
                    &resolve_request("maintainer-bot", &sid, &rid(), caps),
                )
                .await;
            assert_eq!(st, 200, "{body}");
        }
        assert!(s.events(&sid).await.len() >= 8);
        sids.push(sid);
    }
    sids
}

/// The verdict `cra trace verify` gives on an exported chain: the CLI runs this same streaming
/// verifier with these default options and maps its report to the exit status (2 when invalid)
/// and the `-o json` document; that mapping is tested in cra-cli's own tests.
fn cra_trace_verify(ndjson: &[u8]) -> cra_trace::Report {
    cra_trace::verify_reader(ndjson, &cra_trace::VerifyOptions::default(), &mut |_| {}).unwrap()
}

/// Checks every verifier against every edited session of a (re)started server.
async fn check_all(s: &TestServer, sids: &[String], counts: &[u64]) {
    for ((edit, sid), count) in EDITS.iter().zip(sids).zip(counts) {
        let (st, v) = s
            .post(
                Some(AUDITOR),
                &format!("/v1/traces/{sid}/verify"),
                &json!({}),
            )
            .await;
        match expected(*edit) {
            Some((k, "unreadable")) => {
                // The stored bytes are not an event: verify names it as a malformed event, and
                // the chain reads up to it (issue 29, item 4).
                assert_eq!(st, 200, "{edit:?}: {v}");
                assert_eq!(v["valid"], false, "{edit:?}: {v}");
                assert_eq!(v["first_error"]["code"], "malformed_event", "{edit:?}: {v}");
                assert_eq!(v["first_error"]["sequence"], k, "{edit:?}: {v}");
                let m = v["first_error"]["message"].as_str().unwrap();
                assert!(m.contains(&format!("stored event {k} ")), "{edit:?}: {m}");
                let (st, prefix) = s.get(Some(ADMIN), &format!("/v1/traces/{sid}")).await;
                assert_eq!(st, 200, "{edit:?}: the readable prefix is answered");
                assert_eq!(prefix.as_array().unwrap().len() as u64, k, "{edit:?}");
            }
            Some((k, code)) => {
                assert_eq!(st, 200, "{edit:?}: {v}");
                assert_eq!(v["valid"], false, "{edit:?}: {v}");
                assert_eq!(v["first_error"]["sequence"], k, "{edit:?}: {v}");
                assert_eq!(v["first_error"]["code"], code, "{edit:?}: {v}");
                let ndjson = s.export_ndjson(sid).await;
                let report = cra_trace_verify(&ndjson);
                let first = report.first_error();
                assert!(!report.is_valid(), "{edit:?}: {report:?}");
                assert_eq!(first.map(|f| f.sequence), Some(k), "{edit:?}: {report:?}");
                assert_eq!(
                    first.map(|f| f.code.as_str()),
                    Some(code),
                    "{edit:?}: {report:?}"
                );
                let py = appendix_b_verify(&ndjson);
                assert_eq!(py["valid"], false, "{edit:?}: {py}");
                assert_eq!(py["first_error"]["sequence"], k, "{edit:?}: {py}");
                assert_eq!(py["first_error"]["code"], code, "{edit:?}: {py}");
            }
            None => {
                // Not detectable from the chain alone: the export's verifiers say valid.
                assert_eq!(st, 200, "{edit:?}: {v}");
                let ndjson = s.export_ndjson(sid).await;
                let report = cra_trace_verify(&ndjson);
                assert!(report.is_valid(), "{edit:?}: {report:?}");
                assert_eq!(appendix_b_verify(&ndjson)["valid"], true, "{edit:?}");
                let (_, view) = s.get(Some(ADMIN), &format!("/v1/sessions/{sid}")).await;
                if matches!(edit, Edit::DeleteLast) {
                    // The stored head still counts the deleted event: the server's verification
                    // compares the chain with it (the export alone cannot show the loss).
                    assert_eq!(v["valid"], false, "{v}");
                    assert_eq!(v["first_error"]["code"], "sequence_gap", "{v}");
                    assert_eq!(v["first_error"]["sequence"], *count - 1, "{v}");
                    assert_eq!(v["events"].as_u64().unwrap() + 1, *count, "{v}");
                    assert_eq!(view["event_count"], *count, "{view}");
                } else {
                    assert_eq!(v["valid"], true, "{edit:?}: {v}");
                    assert_eq!(v["events"], *count, "{v}");
                }
            }
        }
    }
}

#[tokio::test]
async fn direct_edits_of_the_redb_file_are_reported_at_the_first_affected_sequence() {
    let s = TestServer::start().await;
    let sids = record_chains(&s).await;
    let mut counts = Vec::new();
    for sid in &sids {
        counts.push(s.events(sid).await.len() as u64);
        let (_, v) = s
            .post(Some(ADMIN), &format!("/v1/traces/{sid}/verify"), &json!({}))
            .await;
        assert_eq!(v["valid"], true, "{v}");
    }
    let dir = s.stop_keep().await;
    let file = dir.path().join("data").join(cra_store::redb::DATABASE_FILE);
    let sids2 = sids.clone();
    tokio::task::spawn_blocking(move || {
        let mut raw = RedbRaw(redb::Database::open(&file).unwrap());
        for (edit, sid) in EDITS.iter().zip(&sids2) {
            apply(&mut raw, sid, *edit);
        }
    })
    .await
    .unwrap();
    let s = TestServer::start_in(dir, |_| {}).await;
    check_all(&s, &sids, &counts).await;
    s.stop().await;
}

#[tokio::test]
async fn direct_edits_of_postgres_rows_are_reported_at_the_first_affected_sequence() {
    let Some(url) = cra_store::testing::postgres_url(
        "direct_edits_of_postgres_rows_are_reported_at_the_first_affected_sequence",
    ) else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "tamper");
    let (u, name) = (url.clone(), schema.name().to_owned());
    let s = TestServer::start_blocking_with(move |c| {
        c.postgres = Some(u);
        c.postgres_schema = name;
        c.postgres_pool = 4;
    })
    .await;
    let sids = record_chains(&s).await;
    let mut counts = Vec::new();
    for sid in &sids {
        counts.push(s.events(sid).await.len() as u64);
    }
    // PostgreSQL is edited under the running server: nothing is cached in front of it.
    let sids2 = sids.clone();
    let name = schema.name().to_owned();
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client
            .batch_execute(&format!("SET search_path TO \"{name}\""))
            .unwrap();
        let mut raw = PgRaw(client);
        for (edit, sid) in EDITS.iter().zip(&sids2) {
            apply(&mut raw, sid, *edit);
        }
    })
    .await
    .unwrap();
    check_all(&s, &sids, &counts).await;
    s.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// What an auditor holds: the log's verifier key and a checkpoint it saw.
struct Seen {
    verifiers: cra_tlog::Verifiers,
    origin: String,
    checkpoint: cra_tlog::Checkpoint,
}

/// The auditor's first look: the public key and a checkpoint cut now (as `cra log watch` keeps).
async fn auditor_sees(s: &TestServer) -> Seen {
    let key = s
        .http
        .get(s.url("/v1/log/key"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let verifier = cra_tlog::Ed25519Verifier::parse(key.trim()).unwrap();
    let origin = verifier.name().to_owned();
    let verifiers = cra_tlog::Verifiers::new(vec![verifier]).unwrap();
    let checkpoint = crate::tlog::cut(s, &verifiers, &origin).await;
    Seen {
        verifiers,
        origin,
        checkpoint,
    }
}

/// The auditor's next look, after the operator rewrote a whole chain (head moved) and rebuilt
/// the log from the rewritten chains: the chain verifies on its own, but the log's new
/// checkpoint is not consistent with the one the auditor saw (a different root at the same
/// size, or no consistency proof that verifies).
async fn auditor_catches_the_rewrite(s: &TestServer, sid: &str, seen: &Seen) {
    let (_, v) = s
        .post(Some(ADMIN), &format!("/v1/traces/{sid}/verify"), &json!({}))
        .await;
    assert_eq!(
        v["valid"], true,
        "the rewritten chain verifies on its own: {v}"
    );
    let now = crate::tlog::cut(s, &seen.verifiers, &seen.origin).await;
    let old = &seen.checkpoint;
    assert!(now.size() >= old.size());
    if now.size() == old.size() {
        assert_ne!(
            now.root(),
            old.root(),
            "the rewrite shows as another tree of the same size"
        );
        return;
    }
    let (st, proof) = s
        .get(
            None,
            &format!(
                "/v1/log/proof/consistency?from={}&to={}",
                old.size(),
                now.size()
            ),
        )
        .await;
    assert_eq!(st, 200, "{proof}");
    let hashes: Vec<String> = proof["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect();
    let hashes = cra_tlog::proof::proof_from_hex(&hashes).unwrap();
    assert!(
        cra_tlog::verify_consistency(old.size(), now.size(), old.root(), now.root(), &hashes)
            .is_err(),
        "no proof can make the rebuilt tree extend the one the auditor saw"
    );
}

/// Invariant (issue 26): a whole-chain rewrite that the chain alone cannot reveal is detected
/// by any auditor who saw an earlier checkpoint (redb: the file edited while the server is
/// down, the log's tables dropped so the restarted server rebuilds the tree from the rewritten
/// chains).
#[tokio::test]
async fn a_whole_chain_rewrite_is_caught_by_an_earlier_checkpoint_on_redb() {
    let s = TestServer::start().await;
    let sid = record_chains(&s).await.remove(0);
    let seen = auditor_sees(&s).await;
    let dir = s.stop_keep().await;
    let file = dir.path().join("data").join(cra_store::redb::DATABASE_FILE);
    let sid2 = sid.clone();
    tokio::task::spawn_blocking(move || {
        let mut raw = RedbRaw(redb::Database::open(&file).unwrap());
        apply(&mut raw, &sid2, Edit::Rewrite(0));
        let txn = raw.0.begin_write().unwrap();
        for table in cra_store::testing::REDB_LOG_TABLES {
            txn.delete_table(redb::TableDefinition::<(), ()>::new(table))
                .unwrap();
        }
        txn.commit().unwrap();
    })
    .await
    .unwrap();
    let s = TestServer::start_in(dir, |_| {}).await;
    auditor_catches_the_rewrite(&s, &sid, &seen).await;
    s.stop().await;
}

/// The same on PostgreSQL: the rows rewritten under the running server, the log's rows deleted,
/// and a restarted server rebuilding the tree.
#[tokio::test]
async fn a_whole_chain_rewrite_is_caught_by_an_earlier_checkpoint_on_postgres() {
    let Some(url) = cra_store::testing::postgres_url(
        "a_whole_chain_rewrite_is_caught_by_an_earlier_checkpoint_on_postgres",
    ) else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "rewrite");
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("log.key");
    std::fs::write(
        &key_file,
        cra_runtime::tlog::generate_key("tamper.test/cra-log").unwrap(),
    )
    .unwrap();
    let config = {
        let (u, name, key_file) = (url.clone(), schema.name().to_owned(), key_file.clone());
        move |c: &mut cra_runtime::config::RuntimeConfig| {
            c.postgres = Some(u);
            c.postgres_schema = name;
            c.postgres_pool = 4;
            c.log.key_file = Some(key_file);
        }
    };
    let s = TestServer::start_blocking_with(config.clone()).await;
    let sid = record_chains(&s).await.remove(0);
    let seen = auditor_sees(&s).await;
    s.stop_blocking().await;
    let (sid2, name, u) = (sid.clone(), schema.name().to_owned(), url.clone());
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&u, postgres::NoTls).unwrap();
        client
            .batch_execute(&format!("SET search_path TO \"{name}\""))
            .unwrap();
        let mut raw = PgRaw(client);
        apply(&mut raw, &sid2, Edit::Rewrite(0));
        // The operator keeps the hash column in step with the rewritten bodies.
        raw.0
            .execute(
                "UPDATE trace_events SET event_hash = body::json->>'event_hash' WHERE session_id = $1",
                &[&sid2],
            )
            .unwrap();
        raw.0
            .batch_execute(
                "DELETE FROM tlog_tiles; DELETE FROM tlog_leaves; DELETE FROM tlog_checkpoints;
                 DELETE FROM tlog_state;",
            )
            .unwrap();
    })
    .await
    .unwrap();
    let s = TestServer::start_blocking_with(config).await;
    auditor_catches_the_rewrite(&s, &sid, &seen).await;
    s.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

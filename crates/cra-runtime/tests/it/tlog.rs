//! The transparency log over HTTP (`specs/tlog.md`): the key, checkpoint, consistency proofs and
//! tiles are public; a checkpoint cut on demand covers every event recorded; every event's
//! inclusion proof verifies against it; a later checkpoint is proved consistent with it; only a
//! reader of the event's chain gets its inclusion proof.

use cra_tlog::{Checkpoint, Ed25519Verifier, Hash, Verifiers};
use serde_json::Value;

use crate::support::*;

/// A public text GET: status and body.
async fn public_text(s: &TestServer, path: &str) -> (u16, String) {
    let resp = s.http.get(s.url(path)).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Cuts a checkpoint as the operator and opens it with the log's published key.
pub(crate) async fn cut(s: &TestServer, verifiers: &Verifiers, origin: &str) -> Checkpoint {
    let resp = s
        .http
        .post(s.url("/v1/log/checkpoint"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let note = resp.text().await.unwrap();
    Checkpoint::open(note.as_bytes(), origin, verifiers)
        .unwrap()
        .0
}

fn hex_hashes(v: &Value) -> Vec<Hash> {
    let items: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect();
    cra_tlog::proof::proof_from_hex(&items).unwrap()
}

/// Invariant: a signed checkpoint of the log covers every recorded event, and an auditor proves
/// each event's inclusion in it and the consistency of every later checkpoint with it, using
/// only what the server serves to the public and to a reader of the chain.
#[tokio::test]
async fn every_event_is_proved_in_a_signed_checkpoint_and_checkpoints_stay_consistent() {
    let s = TestServer::start().await;
    let (st, key) = public_text(&s, "/v1/log/key").await;
    assert_eq!(st, 200, "{key}");
    let verifier = Ed25519Verifier::parse(key.trim()).unwrap();
    let origin = verifier.name().to_owned();
    let verifiers = Verifiers::new(vec![verifier]).unwrap();

    let session = s.open_session(AGENT, "ops-bot").await;
    let first = cut(&s, &verifiers, &origin).await;
    let events = s.events(&session).await;
    assert!(first.size() >= events.len() as u64);
    for e in &events {
        let hash = e["event_hash"].as_str().unwrap();
        let path = format!(
            "/v1/log/proof/inclusion?event_hash={hash}&tree_size={}",
            first.size()
        );
        let (st, proof) = s.get(Some(AGENT), &path).await;
        assert_eq!(st, 200, "{proof}");
        let leaf = cra_tlog::leaf_hash(&cra_tlog::hash::from_hex(hash).unwrap());
        cra_tlog::verify_inclusion(
            &leaf,
            proof["leaf_index"].as_u64().unwrap(),
            first.size(),
            &hex_hashes(&proof["hashes"]),
            first.root(),
        )
        .unwrap();
        // Another agent may not read the chain, so gets no proof of its events.
        let (st, _) = s.get(Some(AGENT2), &path).await;
        assert_eq!(st, 403);
    }

    s.open_session(AGENT2, "other-bot").await;
    let second = cut(&s, &verifiers, &origin).await;
    assert!(second.size() > first.size());
    let (st, proof) = s
        .get(
            None,
            &format!(
                "/v1/log/proof/consistency?from={}&to={}",
                first.size(),
                second.size()
            ),
        )
        .await;
    assert_eq!(st, 200, "{proof}");
    cra_tlog::verify_consistency(
        first.size(),
        second.size(),
        first.root(),
        second.root(),
        &hex_hashes(&proof["hashes"]),
    )
    .unwrap();

    // The level-0 tile, fetched without credentials, hashes to the checkpoint's root.
    let (size, resp) = (second.size(), {
        let path = format!("/v1/log/tile/0/000.p/{}", second.size());
        s.http.get(s.url(&path)).send().await.unwrap()
    });
    assert!(size < 256, "one partial tile holds this test's tree");
    assert_eq!(resp.status().as_u16(), 200);
    let bytes = resp.bytes().await.unwrap();
    let leaves: Vec<Hash> = bytes
        .chunks_exact(32)
        .map(|c| c.try_into().unwrap())
        .collect();
    assert_eq!(cra_tlog::root_of(&leaves), *second.root());
    s.stop().await;
}

/// Bad input is refused with a structured error and changes nothing: a malformed hash, a tree
/// larger than the log, impossible consistency sizes, a non-tile path, and a cut by a
/// non-operator.
#[tokio::test]
async fn log_requests_with_bad_input_are_refused_by_name() {
    let s = TestServer::start().await;
    let cases = [
        ("/v1/log/proof/inclusion?event_hash=ABC&tree_size=1", 400),
        ("/v1/log/proof/inclusion?tree_size=1", 400),
        (
            "/v1/log/proof/inclusion?event_hash=0000000000000000000000000000000000000000000000000000000000000000&tree_size=1",
            404,
        ),
        ("/v1/log/proof/consistency?from=2&to=1", 400),
        ("/v1/log/proof/consistency?from=0&to=999999", 400),
        ("/v1/log/tile/0/1234", 404),
        ("/v1/log/tile/9/x", 404),
    ];
    for (path, status) in cases {
        let (st, body) = s.get(Some(AUDITOR), path).await;
        assert_eq!(st, status, "{path}: {body}");
        assert!(
            body["error"].is_string() && body["message"].is_string(),
            "{path}: {body}"
        );
    }
    let (st, _) = s
        .post(Some(AGENT), "/v1/log/checkpoint", &serde_json::json!({}))
        .await;
    assert_eq!(st, 403);
    s.stop().await;
}

/// Waits (10 s at most) until `watch` holds a value `ready` accepts.
async fn until<T>(
    watch: &mut tokio::sync::watch::Receiver<T>,
    what: &str,
    ready: impl FnMut(&T) -> bool,
) {
    let deadline = std::time::Duration::from_secs(10);
    tokio::time::timeout(deadline, watch.wait_for(ready))
        .await
        .unwrap_or_else(|_| panic!("{what} within the deadline"))
        .unwrap();
}

/// The size of `s`'s tree now (no checkpoint cut); the store's handle is dropped off the async
/// workers.
async fn tree_size(s: &TestServer) -> u64 {
    let store = s.server.as_ref().unwrap().state.log.store.clone();
    tokio::task::spawn_blocking(move || store.log_size())
        .await
        .unwrap()
        .unwrap()
}

/// Invariant: on PostgreSQL only the leader's timer cuts checkpoints; when the leader stops,
/// the replica that takes over cuts one at once, covering what was appended meanwhile, signed
/// with the deployment's one key.
#[tokio::test]
async fn the_replica_that_takes_the_lead_cuts_a_checkpoint_at_once_postgres() {
    let name = "the_replica_that_takes_the_lead_cuts_a_checkpoint_at_once_postgres";
    let Some(url) = cra_store::testing::postgres_url(name) else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "lead_cuts");
    let keys = tempfile::tempdir().unwrap();
    let (origin, key_file) = ("replicas.example/cra-log", keys.path().join("log.key"));
    let key = cra_runtime::tlog::generate_key(origin).unwrap();
    cra_runtime::tlog::write_key_file(&key_file, &key).unwrap();
    let replica = |seed: u64| {
        let (url, schema, key_file) = (url.clone(), schema.name().to_owned(), key_file.clone());
        TestServer::start_with_seed(seed, move |c| {
            c.postgres = Some(url);
            c.postgres_schema = schema;
            c.log.origin = Some(origin.to_owned());
            c.log.key_file = Some(key_file);
            // Only the cut made on taking the lead happens within a test.
            c.log.checkpoint_interval_seconds = 3_600;
        })
    };
    // Only watches are kept of each replica's state: its store must be dropped off the async
    // workers, which `stop_blocking` does.
    let watches = |s: &TestServer| {
        let state = &s.server.as_ref().unwrap().state;
        (state.leading.subscribe(), state.log.published())
    };
    let one = replica(7).await;
    let (mut leads, mut published) = watches(&one);
    until(&mut leads, "the first replica leads", |l| *l).await;
    until(&mut published, "the leader's first cut", Option::is_some).await;
    let two = replica(8).await;
    let (mut second_leads, mut second_published) = watches(&two);
    assert!(!*second_leads.borrow(), "one leader at a time");

    // Its `session.started` grows the tree.
    two.open_session(AGENT, "ops-bot").await;
    let size = tree_size(&two).await;
    assert!(*published.borrow() < Some(size), "no cut since the first");
    assert_eq!(
        *second_published.borrow(),
        None,
        "the follower cuts nothing"
    );

    one.stop_blocking().await;
    until(&mut second_leads, "the second replica leads", |l| *l).await;
    until(&mut second_published, "the new leader's cut", |p| {
        *p >= Some(size)
    })
    .await;
    let (st, key) = public_text(&two, "/v1/log/key").await;
    assert_eq!(st, 200, "{key}");
    let (st, note) = public_text(&two, "/v1/log/checkpoint").await;
    assert_eq!(st, 200, "{note}");
    let verifiers = Verifiers::new(vec![Ed25519Verifier::parse(key.trim()).unwrap()]).unwrap();
    let (cp, _) = Checkpoint::open(note.as_bytes(), origin, &verifiers).unwrap();
    assert!(cp.size() >= size, "{} >= {size}", cp.size());
    two.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

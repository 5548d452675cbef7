//! Signed atlases (`[atlas_signing]`, `specs/atlas-signing.md`): with trusted keys configured a
//! server refuses, fail closed, an unsigned or wrongly signed atlas at start, on a `--watch`
//! reload (the last good set stays) and on `POST /v1/atlases` (nothing changes); each refusal
//! after start is an `atlas.refused` event of the operator audit chain. The signature an atlas
//! came with is kept in the catalog, so atlases taken in while no key was trusted are checked at
//! the next signed start and by a signed replica reading them. The watcher is polled directly,
//! as in `watch.rs` (no timer, no sleep).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cra_atlas::signing;
use cra_atlas::sshsig::PrivateKey;
use cra_runtime::atlases::{Watcher, load_inline};
use cra_runtime::build_runtime;
use cra_store::retention::OPERATOR_AUDIT_SESSION;
use cra_wire::{FixedClock, SequentialIds};
use serde_json::Value;

use crate::support::*;
use crate::system::inline_example;

const PAYMENTS: &str = "com.example.payments";

fn trusted() -> PrivateKey {
    PrivateKey::from_seed([11; 32])
}

fn stranger() -> PrivateKey {
    PrivateKey::from_seed([12; 32])
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let target = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &target);
        } else {
            std::fs::copy(&p, &target).unwrap();
        }
    }
}

/// A copy of `dev.cra.github-ops` under `dir`, signed by `key` when given.
fn github_ops(dir: &Path, key: Option<&PrivateKey>) -> PathBuf {
    let to = dir.join("github-ops");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../atlases/dev.cra.github-ops"),
        &to,
    );
    if let Some(key) = key {
        sign_dir(&to, key);
    }
    to
}

fn sign_dir(dir: &Path, key: &PrivateKey) {
    let digest = cra_atlas::load_dir(dir).unwrap().digest;
    std::fs::write(
        signing::signature_path(dir),
        signing::sign_digest(key, &digest),
    )
    .unwrap();
}

fn trust_config(c: &mut cra_runtime::RuntimeConfig, atlas: PathBuf) {
    c.atlases = vec![atlas];
    c.watch = false;
    c.atlas_signing.trusted_keys = vec![trusted().public_key().to_openssh()];
}

/// The error `build_runtime` answers for the test configuration over `dir` with `tweak`
/// applied (it must refuse to start); ids from `seed`, so that starts over one directory never
/// repeat an id.
async fn start_error(
    dir: &Path,
    seed: u64,
    tweak: impl FnOnce(&mut cra_runtime::RuntimeConfig),
) -> String {
    let (mut config, _) = test_config(dir);
    tweak(&mut config);
    let clock = Arc::new(FixedClock::parse(T0).unwrap());
    let ids = Arc::new(SequentialIds::new(1_772_445_600_000, seed));
    let built = tokio::task::spawn_blocking(move || build_runtime(config, clock, ids))
        .await
        .unwrap();
    match built {
        Ok(_) => panic!("the server started"),
        Err(e) => e.to_string(),
    }
}

async fn last_audit_event(s: &TestServer) -> Value {
    s.events(OPERATOR_AUDIT_SESSION).await.pop().unwrap()
}

/// The atlases in force, as their summaries say them but for `signature` (which says how
/// they stand with the keys the server trusts now, not which atlases they are).
async fn in_force(s: &TestServer) -> Value {
    let (st, mut body) = s.get(Some(ADMIN), "/v1/atlases").await;
    assert_eq!(st, 200, "{body}");
    for a in body.as_array_mut().into_iter().flatten() {
        a.as_object_mut().map(|o| o.remove("signature"));
    }
    body
}

/// Each summary's `signature`: `verified`, `signed` or `unsigned`.
async fn signatures(s: &TestServer) -> Vec<String> {
    let (_, body) = s.get(Some(ADMIN), "/v1/atlases").await;
    body.as_array()
        .into_iter()
        .flatten()
        .map(|a| a["signature"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Invariant: with trusted keys, a server does not start on an atlas that is unsigned, signed by
/// another key or signed before an edit; it says which atlas and why, and records each refusal
/// in the operator audit chain. A signed one starts.
#[tokio::test]
async fn a_start_refuses_an_unsigned_or_wrongly_signed_atlas_names_it_and_records_it() {
    let tmp = tempfile::tempdir().unwrap();
    let server_dir = tempfile::tempdir().unwrap();
    let unsigned = github_ops(&tmp.path().join("u"), None);
    let e = start_error(server_dir.path(), 100, |c| {
        trust_config(c, unsigned.clone())
    })
    .await;
    assert!(
        e.contains("dev.cra.github-ops") && e.contains("not signed") && e.contains(".atlas.sig"),
        "{e}"
    );

    let foreign = github_ops(&tmp.path().join("f"), Some(&stranger()));
    let e = start_error(server_dir.path(), 200, |c| trust_config(c, foreign.clone())).await;
    assert!(
        e.contains("dev.cra.github-ops") && e.contains("not a trusted key"),
        "{e}"
    );

    // A signature of other content (the atlas edited after signing).
    let stale = github_ops(&tmp.path().join("s"), Some(&trusted()));
    std::fs::write(stale.join("context/late.md"), "late\n").unwrap();
    let e = start_error(server_dir.path(), 300, |c| trust_config(c, stale.clone())).await;
    assert!(e.contains("does not match"), "{e}");

    let signed = github_ops(&tmp.path().join("ok"), Some(&trusted()));
    let s = TestServer::start_in(server_dir, |c| trust_config(c, signed)).await;
    assert_eq!(in_force(&s).await[0]["atlas_id"], "dev.cra.github-ops");
    let refused: Vec<Value> = s
        .events(OPERATOR_AUDIT_SESSION)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == "atlas.refused")
        .collect();
    assert_eq!(refused.len(), 3, "{refused:?}");
    for r in &refused {
        let p = &r["payload"];
        assert_eq!(
            (&p["source"], &p["atlas_id"]),
            (&"start".into(), &"dev.cra.github-ops".into())
        );
        assert!(p["digest"].is_string() && p["message"].is_string(), "{r}");
    }
    s.stop().await;
}

/// Invariant: a reload of an atlas whose signature no longer holds keeps the last good set in
/// force and records the refusal; signing it again lets the next reload take it.
#[tokio::test]
async fn a_watch_reload_of_an_unsigned_change_keeps_the_last_good_and_records_the_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    let atlas = github_ops(tmp.path(), Some(&trusted()));
    let dir = atlas.clone();
    let s = TestServer::start_with(move |c| trust_config(c, dir)).await;
    let state = s.server.as_ref().unwrap().state.clone();
    let mut watcher = Watcher::new(&state);
    let before = in_force(&s).await;

    let manifest = atlas.join("atlas.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m["version"] = "1.2.0".into();
    std::fs::write(&manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let (w, outcome) = watcher.poll_recorded(&state).await;
    watcher = w;
    let e = outcome.expect("a change was seen").unwrap_err();
    assert!(e.contains("1.2.0") && e.contains("does not match"), "{e}");
    assert_eq!(in_force(&s).await, before, "the last good set stays");
    let refused = last_audit_event(&s).await;
    assert_eq!(refused["event_type"], "atlas.refused");
    assert_eq!(refused["payload"]["source"], "watch");
    assert!(
        refused["payload"]["message"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{refused}"
    );

    // Signed by a stranger: still refused.
    sign_dir(&atlas, &stranger());
    let (w, outcome) = watcher.poll_recorded(&state).await;
    watcher = w;
    assert!(outcome.unwrap().unwrap_err().contains("not a trusted key"));
    assert_eq!(in_force(&s).await, before);

    sign_dir(&atlas, &trusted());
    let (_, outcome) = watcher.poll_recorded(&state).await;
    assert_eq!(outcome, Some(Ok(1)));
    assert_eq!(in_force(&s).await[0]["version"], "1.2.0");
    s.stop().await;
}

/// Invariant: `POST /v1/atlases` takes an inline atlas only with a `signature` by a trusted key
/// over the digest the server computes for it; a refusal is a structured 400 at `/signature`,
/// changes nothing and is recorded.
#[tokio::test]
async fn a_posted_atlas_needs_a_trusted_signature_and_each_refusal_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let atlas = github_ops(tmp.path(), Some(&trusted()));
    let s = TestServer::start_with(move |c| trust_config(c, atlas)).await;
    let before = in_force(&s).await;
    let mut body = inline_example(PAYMENTS);
    let digest = load_inline(&body, "").unwrap().digest;

    let got = s.post(Some(AUTHOR), "/v1/atlases", &body).await;
    assert_error(&got, 400, "invalid_atlas");
    assert_eq!(
        got.1["details"]["errors"][0]["pointer"], "/signature",
        "{}",
        got.1
    );
    assert!(
        got.1["message"].as_str().unwrap().contains(&digest),
        "{}",
        got.1
    );
    assert_eq!(in_force(&s).await, before, "nothing changed");
    let refused = last_audit_event(&s).await;
    assert_eq!(refused["event_type"], "atlas.refused");
    assert_eq!(
        (
            &refused["payload"]["source"],
            &refused["payload"]["atlas_id"]
        ),
        (&"install".into(), &PAYMENTS.into())
    );
    assert_eq!(refused["payload"]["digest"], digest.as_str());

    body["signature"] = signing::sign_digest(&stranger(), &digest).into();
    let got = s.post(Some(AUTHOR), "/v1/atlases", &body).await;
    assert_error(&got, 400, "invalid_atlas");
    assert!(
        got.1["message"]
            .as_str()
            .unwrap()
            .contains("not a trusted key"),
        "{}",
        got.1
    );
    assert_eq!(in_force(&s).await, before);
    assert_eq!(last_audit_event(&s).await["event_type"], "atlas.refused");

    body["signature"] = 7.into();
    let got = s.post(Some(AUTHOR), "/v1/atlases", &body).await;
    assert_error(&got, 400, "invalid_request");

    // The same signature `cra atlas sign` would make for these files.
    body["signature"] = signing::sign_digest(&trusted(), &digest).into();
    let (st, installed) = s.post(Some(AUTHOR), "/v1/atlases", &body).await;
    assert_eq!(st, 201, "{installed}");
    assert_eq!(installed["digest"], digest.as_str());
    assert_eq!(last_audit_event(&s).await["event_type"], "atlas.installed");
    s.stop().await;
}

/// Without trusted keys nothing is checked, and a `signature` member is accepted as it is.
#[tokio::test]
async fn without_trusted_keys_nothing_is_checked() {
    let s = TestServer::start().await;
    let mut body = inline_example(PAYMENTS);
    body["signature"] = "not checked".into();
    let (st, installed) = s.post(Some(AUTHOR), "/v1/atlases", &body).await;
    assert_eq!(st, 201, "{installed}");
    s.stop().await;
}

/// Invariant: an archive is checked against the signature beside it (the digest's signature,
/// the same text as its directory's), and `--watch` sees a new signature file even when the
/// archive itself did not change.
#[tokio::test]
async fn an_archive_is_checked_against_the_signature_beside_it_and_watch_sees_it_change() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = github_ops(tmp.path(), Some(&trusted()));
    let atlas = cra_atlas::load_dir(&dir).unwrap();
    let archive = tmp.path().join("github-ops.atlas.tar.gz");
    cra_atlas::pack::pack_atlas(&atlas, &archive).unwrap();
    let sig = signing::signature_path(&archive);
    std::fs::copy(signing::signature_path(&dir), &sig).unwrap();
    let source = archive.clone();
    let s = TestServer::start_with(move |c| trust_config(c, source)).await;
    assert_eq!(in_force(&s).await[0]["digest"], atlas.digest.as_str());
    let state = s.server.as_ref().unwrap().state.clone();
    let watcher = Watcher::new(&state);

    std::fs::write(&sig, signing::sign_digest(&stranger(), &atlas.digest)).unwrap();
    let (_, outcome) = watcher.poll_recorded(&state).await;
    let e = outcome.expect("the new signature is seen").unwrap_err();
    assert!(e.contains("not a trusted key"), "{e}");
    assert_eq!(in_force(&s).await[0]["digest"], atlas.digest.as_str());
    s.stop().await;
}

/// Invariant: `PUT /v1/atlases` replaces the set only when every atlas in it is signed by a
/// trusted key; one that is not is refused at its own pointer, and nothing changes.
#[tokio::test]
async fn a_put_set_with_one_unsigned_atlas_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let atlas = github_ops(tmp.path(), Some(&trusted()));
    let s = TestServer::start_with(move |c| trust_config(c, atlas)).await;
    let before = in_force(&s).await;
    let mut signed = inline_example(PAYMENTS);
    let digest = load_inline(&signed, "").unwrap().digest;
    signed["signature"] = signing::sign_digest(&trusted(), &digest).into();
    let unsigned = inline_example("com.example.customer-support");
    let body = serde_json::json!({"atlases": [signed, unsigned]});
    let r = s
        .http
        .put(s.url("/v1/atlases"))
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let got = (r.status().as_u16(), r.json::<Value>().await.unwrap());
    assert_error(&got, 400, "invalid_atlas");
    assert_eq!(
        got.1["details"]["errors"][0]["pointer"], "/atlases/1/signature",
        "{}",
        got.1
    );
    assert_eq!(in_force(&s).await, before, "nothing changed");
    let refused = last_audit_event(&s).await;
    assert_eq!(refused["event_type"], "atlas.refused");
    assert_eq!(refused["payload"]["source"], "replace_set");
    s.stop().await;
}

/// Posts `atlas` (an example's inline form) as an author, signed by `key` when given; answers
/// the status.
async fn post_signed(s: &TestServer, atlas: &str, key: Option<&PrivateKey>) -> u16 {
    let mut body = inline_example(atlas);
    if let Some(key) = key {
        let digest = load_inline(&body, "").unwrap().digest;
        body["signature"] = signing::sign_digest(key, &digest).into();
    }
    let (st, answer) = s.post(Some(AUTHOR), "/v1/atlases", &body).await;
    assert!(st == 200 || st == 201, "{answer}");
    st
}

/// Invariant: the catalog keeps the signature each atlas came with, signing on or off. A start
/// with trusted keys refuses, fail closed, an atlas the catalog keeps and no source holds when
/// it was taken in unsigned or signed by a key not trusted, names it and says how to mend it,
/// and records the refusal; the same atlas posted again with a trusted signature keeps the new
/// signature (answered unchanged), and the next signed start takes it.
#[tokio::test]
async fn a_start_with_trusted_keys_refuses_a_catalogued_atlas_taken_in_unsigned() {
    const SUPPORT: &str = "com.example.customer-support";
    let tmp = tempfile::tempdir().unwrap();
    let atlas = github_ops(tmp.path(), Some(&trusted()));
    let source = atlas.clone();
    let plain = move |c: &mut cra_runtime::RuntimeConfig| {
        c.atlases = vec![source];
        c.watch = false;
    };
    let s = TestServer::start_with(plain.clone()).await;
    assert_eq!(post_signed(&s, SUPPORT, Some(&stranger())).await, 201);
    assert_eq!(post_signed(&s, PAYMENTS, None).await, 201);
    let before = in_force(&s).await;
    assert_eq!(
        signatures(&s).await,
        ["signed", "signed", "unsigned"],
        "trusting no key, a signature is kept but not verified"
    );
    let dir = s.stop_keep().await;

    let e = start_error(dir.path(), 500, |c| trust_config(c, atlas.clone())).await;
    assert!(
        e.contains(SUPPORT) && e.contains("kept in the atlas catalog"),
        "{e}"
    );
    assert!(
        e.contains("not a trusted key") && e.contains("--atlas DIR"),
        "{e}"
    );

    let s = TestServer::start_over(dir, 600, plain.clone()).await;
    assert_eq!(post_signed(&s, SUPPORT, Some(&trusted())).await, 200);
    let dir = s.stop_keep().await;
    let e = start_error(dir.path(), 700, |c| trust_config(c, atlas.clone())).await;
    assert!(
        e.contains(PAYMENTS) && e.contains("taken in without a signature"),
        "{e}"
    );

    let s = TestServer::start_over(dir, 800, plain).await;
    assert_eq!(post_signed(&s, PAYMENTS, Some(&trusted())).await, 200);
    let refused: Vec<Value> = s
        .events(OPERATOR_AUDIT_SESSION)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == "atlas.refused")
        .map(|e| e["payload"].clone())
        .collect();
    let named: Vec<(&Value, &Value)> = refused
        .iter()
        .map(|p| (&p["source"], &p["atlas_id"]))
        .collect();
    let (start, support, payments) = ("start".into(), SUPPORT.into(), PAYMENTS.into());
    assert_eq!(named, [(&start, &support), (&start, &payments)]);
    let dir = s.stop_keep().await;

    let s = TestServer::start_over(dir, 900, |c| trust_config(c, atlas)).await;
    assert_eq!(in_force(&s).await, before, "every atlas is in force again");
    assert_eq!(
        signatures(&s).await,
        ["verified"; 3],
        "with trusted keys every atlas in force was verified"
    );
    s.stop().await;
}

/// Invariant: a replica with trusted keys does not take a generation in which another replica
/// on its schema (trusting no key) stored an unsigned atlas: the reading is refused with the
/// atlas named, and its last good set stays in force.
#[tokio::test]
async fn a_replica_with_trusted_keys_refuses_an_unsigned_atlas_another_stored_postgres() {
    let name = "a_replica_with_trusted_keys_refuses_an_unsigned_atlas_another_stored_postgres";
    let Some(url) = cra_store::testing::postgres_url(name) else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "signed_replicas");
    let tmp = tempfile::tempdir().unwrap();
    let atlas = github_ops(tmp.path(), Some(&trusted()));
    let on_schema = |c: &mut cra_runtime::RuntimeConfig, trusting: bool| {
        trust_config(c, atlas.clone());
        if !trusting {
            c.atlas_signing.trusted_keys.clear();
        }
        c.postgres = Some(url.clone());
        c.postgres_schema = schema.name().to_owned();
    };
    let signed = TestServer::start_with_seed(7, |c| on_schema(c, true)).await;
    let open = TestServer::start_with_seed(8, |c| on_schema(c, false)).await;
    let before = in_force(&signed).await;
    assert_eq!(post_signed(&open, PAYMENTS, None).await, 201);

    let state = signed.server.as_ref().unwrap().state.clone();
    let refreshed = tokio::task::spawn_blocking(move || state.refresh_atlases())
        .await
        .unwrap();
    let e = refreshed.expect_err("the unsigned atlas was taken");
    assert!(
        e.contains(PAYMENTS) && e.contains("taken in without a signature"),
        "{e}"
    );
    assert_eq!(in_force(&signed).await, before, "the last good set stays");
    for s in [signed, open] {
        s.stop_blocking().await;
    }
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

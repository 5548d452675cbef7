//! Key lifecycle without a restart (issue 31, item 3): the keys file and the JWT settings
//! reload; a revoked, removed or expired key is refused from the next request; a broken file
//! keeps the last good keys; every change and every refused reload is recorded in the operator
//! audit chain, naming keys by fingerprint only. The reload is driven directly (the server's own
//! watch is off, so nothing races the test); `cra serve`'s SIGHUP and file watch are tested in
//! `cra-cli`'s `serve.rs`. The log key's rotation is here too.

use cra_runtime::auth::fingerprint;
use cra_runtime::credentials::{ReloadSource, reload_recorded};
use cra_store::retention::OPERATOR_AUDIT_SESSION;
use serde_json::Value;

use crate::support::*;

const NEW_KEY: &str = "new-agent-key-000000000";

/// The test keys with the first agent's key revoked, the second agent's removed, a new agent
/// key expiring an hour after the test clock's start, and the auditor given the author role.
fn edited_keys() -> String {
    let revoked = KEYS_TOML.replacen(
        "actor_id = \"ops-bot\"\nactor_type = \"agent\"\nroles = [\"agent\"]",
        "actor_id = \"ops-bot\"\nactor_type = \"agent\"\nroles = [\"agent\"]\nrevoked = true",
        1,
    );
    let removed = revoked.replacen(
        "[[keys]]\ntoken = \"agent2-key-00000000000\"\nactor_id = \"other-bot\"\nactor_type = \"agent\"\nroles = [\"agent\"]\n",
        "",
        1,
    );
    let promoted = removed.replacen(
        "actor_id = \"audrey\"\nactor_type = \"human\"\nroles = [\"auditor\"]",
        "actor_id = \"audrey\"\nactor_type = \"human\"\nroles = [\"auditor\", \"author\"]",
        1,
    );
    assert!(promoted.len() < KEYS_TOML.len() + 200 && promoted != KEYS_TOML);
    format!(
        "{promoted}\n[[keys]]\ntoken = \"{NEW_KEY}\"\nactor_id = \"new-bot\"\nactor_type = \"agent\"\nroles = [\"agent\"]\nexpires_at = 2026-03-02T11:00:00Z\n"
    )
}

async fn status_of(s: &TestServer, key: &str) -> (u16, Value) {
    s.get(Some(key), "/v1/atlases").await
}

/// The operator audit chain's events of `event_type`.
async fn recorded(s: &TestServer, event_type: &str) -> Vec<Value> {
    s.events(OPERATOR_AUDIT_SESSION)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == event_type)
        .collect()
}

fn fingerprints(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_owned())
        .collect()
}

/// The whole scenario, on the server `s` (started with `watch_keys = false`).
async fn keys_reload_scenario(s: TestServer) {
    let state = s.server.as_ref().unwrap().state.clone();
    let keys_file = state.auth.keys_path().to_owned();
    for key in [AGENT, AGENT2] {
        assert_eq!(status_of(&s, key).await.0, 200);
    }
    assert!(!state.auth.files_changed());

    // Written, not yet reloaded: nothing changes until the reload.
    std::fs::write(&keys_file, edited_keys()).unwrap();
    assert!(state.auth.files_changed());
    assert_eq!(status_of(&s, AGENT).await.0, 200);
    assert_error(&status_of(&s, NEW_KEY).await, 401, "unauthenticated");

    let change = reload_recorded(&state, ReloadSource::Watch)
        .await
        .unwrap()
        .expect("the keys changed");
    assert!(!state.auth.files_changed());
    // From the next request: the revoked and removed keys are refused, the new one works.
    let refused = status_of(&s, AGENT).await;
    assert_error(&refused, 401, "unauthenticated");
    assert!(
        refused.1["message"]
            .as_str()
            .unwrap()
            .contains("was revoked"),
        "{}",
        refused.1
    );
    assert_error(&status_of(&s, AGENT2).await, 401, "unauthenticated");
    assert_eq!(status_of(&s, NEW_KEY).await.0, 200);
    assert_eq!(status_of(&s, ADMIN).await.0, 200);

    // Recorded once, by fingerprint: never a token anywhere in the operator chain.
    let events = recorded(&s, "keys.changed").await;
    assert_eq!(events.len(), 1);
    let p = &events[0]["payload"];
    assert_eq!(p["source"], "watch");
    assert_eq!(fingerprints(&p["added"]), [fingerprint(NEW_KEY)]);
    assert_eq!(p["added"][0]["expires_at"], "2026-03-02T11:00:00.000000Z");
    assert_eq!(fingerprints(&p["removed"]), [fingerprint(AGENT2)]);
    let mut changed = fingerprints(&p["changed"]);
    changed.sort();
    let mut expected = vec![fingerprint(AGENT), fingerprint(AUDITOR)];
    expected.sort();
    assert_eq!(changed, expected);
    assert_eq!(p["jwt_changed"], false);
    assert_eq!(p["in_force"], 7);
    assert_eq!(change.added.len(), 1);
    let chain = serde_json::to_string(&s.events(OPERATOR_AUDIT_SESSION).await).unwrap();
    for token in [AGENT, AGENT2, NEW_KEY, AUDITOR, ADMIN] {
        assert!(!chain.contains(token), "the chain holds a token");
    }

    // The new key expires with the injected clock, at its expiry to the microsecond.
    s.clock
        .advance(time::Duration::hours(1) - time::Duration::microseconds(1));
    assert_eq!(status_of(&s, NEW_KEY).await.0, 200);
    s.clock.advance(time::Duration::microseconds(1));
    let expired = status_of(&s, NEW_KEY).await;
    assert_error(&expired, 401, "unauthenticated");
    assert!(
        expired.1["message"]
            .as_str()
            .unwrap()
            .contains("expired at 2026-03-02T11:00:00.000000Z"),
        "{}",
        expired.1
    );

    // Nothing changed: nothing is recorded.
    assert!(
        reload_recorded(&state, ReloadSource::Signal)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(recorded(&s, "keys.changed").await.len(), 1);

    // A broken file keeps the last good keys, is recorded and counted, and is not retried by
    // the watch until the file changes again.
    std::fs::write(&keys_file, "[[keys]]\ntoken = \"short\"\n").unwrap();
    let e = reload_recorded(&state, ReloadSource::Watch)
        .await
        .unwrap_err();
    assert!(e.contains("keys file"), "{e}");
    assert!(!state.auth.files_changed(), "a refused file is not retried");
    assert_eq!(status_of(&s, ADMIN).await.0, 200);
    assert_error(&status_of(&s, AGENT).await, 401, "unauthenticated");
    let refusals = recorded(&s, "keys.refused").await;
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0]["payload"]["source"], "watch");
    let (status, ready) = s.get(None, "/v1/health/ready").await;
    assert_eq!(
        (status, &ready["status"]),
        (200, &"degraded".into()),
        "{ready}"
    );
    assert!(
        ready["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("keys reload failed: keys file"),
        "{ready}"
    );
    let metrics = s.http.get(s.url("/metrics")).bearer_auth(ADMIN).send();
    let text = metrics.await.unwrap().text().await.unwrap();
    assert!(text.contains("cra_keys_reload_failures_total 1"), "{text}");

    // Mended: the original keys are back in force, and that is one more change.
    std::fs::write(&keys_file, KEYS_TOML).unwrap();
    assert!(state.auth.files_changed());
    reload_recorded(&state, ReloadSource::Signal)
        .await
        .unwrap()
        .expect("a change");
    assert_eq!(status_of(&s, AGENT).await.0, 200);
    assert_eq!(status_of(&s, AGENT2).await.0, 200);
    assert_eq!(recorded(&s, "keys.changed").await.len(), 2);
    assert_eq!(s.get(None, "/v1/health/ready").await.1["status"], "ok");
    // The last reference to a PostgreSQL store is dropped off the async workers.
    drop(state);
    s.stop_blocking().await;
}

#[tokio::test]
async fn keys_reload_without_a_restart_and_every_change_is_recorded() {
    let s = TestServer::start_with(|c| c.watch_keys = false).await;
    keys_reload_scenario(s).await;
}

#[tokio::test]
async fn keys_reload_without_a_restart_and_every_change_is_recorded_postgres() {
    let name = "keys_reload_without_a_restart_and_every_change_is_recorded_postgres";
    let Some(url) = cra_store::testing::postgres_url(name) else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "keys_reload");
    let schema_name = schema.name().to_owned();
    let s = TestServer::start_with(move |c| {
        c.watch_keys = false;
        c.postgres = Some(url);
        c.postgres_schema = schema_name;
    })
    .await;
    keys_reload_scenario(s).await;
    // Dropping the schema connects a synchronous client: off the async workers.
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

fn hs256(secret: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let claims = serde_json::json!({"sub": "jwt-bot", "roles": ["agent"], "exp": exp});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

/// The JWT settings reload from the configuration file, and so does the secret file they name:
/// a token signed with the old secret is refused after the reload, one with the new accepted.
#[tokio::test]
async fn jwt_settings_and_their_secret_file_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (
        "first-hs256-secret-0123456789abcdefghij",
        "second-hs256-secret-0123456789abcdefghi",
    );
    let secret = dir.path().join("jwt.secret");
    std::fs::write(&secret, one).unwrap();
    let config_file = dir.path().join("cra.toml");
    let jwt_section = |issuer: &str| {
        format!(
            "[jwt]\nalgorithm = \"HS256\"\nsecret_file = \"{}\"\n{issuer}",
            secret.display()
        )
    };
    std::fs::write(&config_file, jwt_section("")).unwrap();
    let from_file = cra_runtime::config::RuntimeConfig::from_file(&config_file).unwrap();
    let s = TestServer::start_with(move |c| {
        c.watch_keys = false;
        c.jwt = from_file.jwt;
        c.config_file = from_file.config_file;
    })
    .await;
    let state = s.server.as_ref().unwrap().state.clone();
    assert_eq!(status_of(&s, &hs256(one)).await.0, 200);

    std::fs::write(&secret, two).unwrap();
    assert!(state.auth.files_changed());
    let change = reload_recorded(&state, ReloadSource::Signal)
        .await
        .unwrap()
        .expect("the secret changed");
    assert!(change.jwt_changed && change.added.is_empty() && change.removed.is_empty());
    assert_error(&status_of(&s, &hs256(one)).await, 401, "unauthenticated");
    assert_eq!(status_of(&s, &hs256(two)).await.0, 200);

    // The [jwt] section itself: a required issuer the token lacks.
    std::fs::write(
        &config_file,
        jwt_section("issuer = \"https://idp.example\"\n"),
    )
    .unwrap();
    assert!(state.auth.files_changed());
    reload_recorded(&state, ReloadSource::Watch)
        .await
        .unwrap()
        .expect("the issuer changed");
    assert_error(&status_of(&s, &hs256(two)).await, 401, "unauthenticated");
    let events = recorded(&s, "keys.changed").await;
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e["payload"]["jwt_changed"] == true));
    assert!(
        !serde_json::to_string(&events)
            .unwrap()
            .contains("second-hs256")
    );
    s.stop().await;
}

/// The log key's rotation (`log.rotation_key_files`): while both keys are configured every
/// checkpoint carries both signatures, so verifiers holding either key accept it; the store
/// moves to the new key only through a configuration that still signs with the old one; after
/// the rotation the old key alone no longer starts a server on this store.
#[tokio::test]
async fn the_log_key_rotates_through_checkpoints_signed_by_both_keys() {
    let keys = tempfile::tempdir().unwrap();
    let origin = "rotating.example/cra-log";
    let (old, new) = (keys.path().join("old.key"), keys.path().join("new.key"));
    for path in [&old, &new] {
        let key = cra_runtime::tlog::generate_key(origin).unwrap();
        cra_runtime::tlog::write_key_file(path, &key).unwrap();
    }
    let verifier = |path: &std::path::Path| {
        let text = std::fs::read_to_string(path).unwrap();
        let signer = cra_tlog::Ed25519Signer::parse(text.trim()).unwrap();
        cra_tlog::Verifiers::new(vec![signer.verifier()]).unwrap()
    };
    let (old_verifier, new_verifier) = (verifier(&old), verifier(&new));
    let with = |primary: &std::path::Path, rotating: Vec<std::path::PathBuf>| {
        let primary = primary.to_owned();
        move |c: &mut cra_runtime::config::RuntimeConfig| {
            c.log.origin = Some(origin.to_owned());
            c.log.key_file = Some(primary);
            c.log.rotation_key_files = rotating;
            c.log.checkpoint_interval_seconds = 3_600;
        }
    };
    // Cuts a checkpoint of what the server holds and answers the note as served.
    async fn cut(s: &TestServer) -> String {
        let resp = s
            .http
            .post(s.url("/v1/log/checkpoint"))
            .bearer_auth(OPERATOR);
        let resp = resp.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.text().await.unwrap()
    }
    let opens = |note: &str, verifiers: &cra_tlog::Verifiers| {
        cra_tlog::Checkpoint::open(note.as_bytes(), origin, verifiers).is_ok()
    };

    let s = TestServer::start_with(with(&old, Vec::new())).await;
    s.open_session(AGENT, "ops-bot").await;
    let note = cut(&s).await;
    assert!(opens(&note, &old_verifier) && !opens(&note, &new_verifier));
    let mut dir = s.stop_keep().await;

    // Phase 1 and 2: both keys sign, whichever is primary; either verifier accepts.
    for (seed, primary, rotating) in [(43, &old, &new), (44, &new, &old)] {
        let s = TestServer::start_over(dir, seed, with(primary, vec![rotating.clone()])).await;
        s.open_session(AGENT, "ops-bot").await;
        let note = cut(&s).await;
        assert!(
            opens(&note, &old_verifier) && opens(&note, &new_verifier),
            "{note}"
        );
        dir = s.stop_keep().await;
    }
    // The swap (phase 2) was recorded once, naming both keys; nothing else moved the key.
    let s = TestServer::start_over(dir, 45, with(&new, Vec::new())).await;
    let rotations: Vec<Value> = s
        .events(OPERATOR_AUDIT_SESSION)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == "log.key_rotated")
        .collect();
    assert_eq!(rotations.len(), 1, "{rotations:?}");
    let p = &rotations[0]["payload"];
    let key_of = |path: &std::path::Path| {
        let text = std::fs::read_to_string(path).unwrap();
        let signer = cra_tlog::Ed25519Signer::parse(text.trim()).unwrap();
        signer.verifier().to_key_string()
    };
    assert_eq!(p["previous_key"], key_of(&old));
    assert_eq!(p["key"], key_of(&new));
    assert_eq!(p["rotating"], serde_json::json!([key_of(&old)]));
    // Phase 3: the new key alone.
    s.open_session(AGENT, "ops-bot").await;
    let note = cut(&s).await;
    assert!(opens(&note, &new_verifier) && !opens(&note, &old_verifier));
    let dir = s.stop_keep().await;

    // The old key alone no longer starts a server on this store.
    let (mut config, _) = test_config(dir.path());
    with(&old, Vec::new())(&mut config);
    let clock = std::sync::Arc::new(cra_wire::FixedClock::parse(T0).unwrap());
    let ids = std::sync::Arc::new(cra_wire::SequentialIds::new(1_772_445_600_000, 46));
    let refused = tokio::task::spawn_blocking(move || {
        cra_runtime::build_runtime(config, clock, ids).map(|_| ())
    })
    .await
    .unwrap();
    let e = refused
        .expect_err("the old key alone is refused")
        .to_string();
    assert!(e.contains(origin), "{e}");
}

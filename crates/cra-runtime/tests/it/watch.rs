//! `--watch`: a changed atlas directory is reloaded atomically; a broken one is reported and the
//! last good atlases stay in force. The watcher's poll is driven directly (no timer, no sleep):
//! the background task only calls the same [`Watcher::poll`] once a second.

use std::path::Path;

use cra_runtime::atlases::Watcher;
use serde_json::Value;

use crate::support::*;

/// Copies a directory tree.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn set_version(manifest: &Path, version: &str) {
    let mut m: Value = serde_json::from_slice(&std::fs::read(manifest).unwrap()).unwrap();
    m["version"] = Value::String(version.into());
    std::fs::write(manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

async fn version_in_force(s: &TestServer) -> (String, String) {
    let (status, body) = s.get(Some(ADMIN), "/v1/atlases").await;
    assert_eq!(status, 200, "{body}");
    let list = body.as_array().unwrap();
    assert_eq!(list.len(), 1, "{body}");
    (
        list[0]["version"].as_str().unwrap().to_owned(),
        list[0]["digest"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn a_changed_atlas_is_reloaded_and_a_broken_one_keeps_the_last_good() {
    let src = tempfile::tempdir().unwrap();
    let atlas = src.path().join("github-ops");
    copy_tree(
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../atlases/dev.cra.github-ops"
        )),
        &atlas,
    );
    let dir = atlas.clone();
    let s = TestServer::start_with(move |c| {
        c.atlases = vec![dir];
        // The background task would poll too, on its own timer, racing this test's polls: the
        // test is the only poller.
        c.watch = false;
    })
    .await;
    let state = s.server.as_ref().unwrap().state.clone();
    let mut watcher = Watcher::new(&state);
    let (v0, d0) = version_in_force(&s).await;
    assert_eq!(v0, "1.1.0");

    // Nothing changed: nothing reloads.
    assert_eq!(watcher.poll(&state), None);

    // A valid change: the new version is in force, with a new digest, and the replacement is
    // recorded in the operator audit chain.
    let manifest = atlas.join("atlas.json");
    set_version(&manifest, "1.2.0");
    let (w, outcome) = watcher.poll_recorded(&state).await;
    watcher = w;
    assert_eq!(outcome, Some(Ok(1)));
    let (v1, d1) = version_in_force(&s).await;
    assert_eq!(v1, "1.2.0");
    assert_ne!(d1, d0);
    let audit = cra_store::retention::OPERATOR_AUDIT_SESSION;
    let recorded = s.events(audit).await.pop().unwrap();
    assert_eq!(recorded["event_type"], "atlas.replaced");
    let p = &recorded["payload"];
    assert_eq!(
        (&p["version"], &p["replaced_version"]),
        (&"1.2.0".into(), &"1.1.0".into())
    );
    assert_eq!(
        (&p["digest"], &p["source"]),
        (&d1.clone().into(), &"watch".into())
    );

    // A broken change: reported, and 1.2.0 stays in force; resolves keep working.
    let good = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, b"{\"atlas_version\": \"1.0\", \"atlas_id\": ").unwrap();
    let (w, failed) = watcher.poll_recorded(&state).await;
    watcher = w;
    let failed = failed.expect("a change was seen");
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(version_in_force(&s).await, (v1.clone(), d1.clone()));
    let refused = s.events(audit).await.pop().unwrap();
    assert_eq!(refused["event_type"], "atlas.refused");
    assert_eq!(refused["payload"]["source"], "watch");
    let (status, metrics) = s.metrics().await;
    assert_eq!(status, 200);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("cra_atlas_reload_failures_total") && l.ends_with(" 1")),
        "the failure is counted: {metrics}"
    );
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let (status, body) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &rid(), &[]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Ready, but degraded: it serves the last good set, and says why.
    let (status, ready) = s.get(None, "/v1/health/ready").await;
    assert_eq!(
        (status, &ready["status"]),
        (200, &"degraded".into()),
        "{ready}"
    );
    let problems = ready["problems"].as_array().unwrap();
    assert!(
        problems.len() == 1
            && problems[0]
                .as_str()
                .unwrap()
                .starts_with("atlas reload failed: "),
        "{ready}"
    );

    // Repaired: the next poll loads it, and the replica is fully ready again.
    std::fs::write(&manifest, &good).unwrap();
    set_version(&manifest, "1.3.0");
    assert_eq!(watcher.poll(&state), Some(Ok(1)));
    assert_eq!(version_in_force(&s).await.0, "1.3.0");
    let (_, ready) = s.get(None, "/v1/health/ready").await;
    assert_eq!(ready["status"], "ok");
    assert!(ready.get("problems").is_none(), "{ready}");
    s.stop().await;
}

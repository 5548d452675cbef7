//! A full disk, for real: a server whose data directory is on a 20 MiB tmpfs is written to until
//! the disk is full. Writes are refused cleanly, `GET /v1/health` answers 503 while the store
//! cannot write, and once space is freed the same process recovers (the store is reopened, no
//! restart): health is 200 again, writes succeed, and every write acknowledged before the disk
//! filled is there, in a chain that verifies.
//!
//! Mounting needs root (CI runs as root); where the mount fails the test says why and skips.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::{AGENT, TestServer};

/// A tmpfs of `size_mib` mounted on a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(size_mib: u32) -> Option<Self> {
        let dir = std::env::temp_dir().join(format!("cra-disk-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(&dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Self { dir }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a {size_mib} MiB tmpfs ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                let _ = std::fs::remove_dir(&dir);
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Writes `path` until the file system has no room left; returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    let _ = f.sync_all();
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_not_ready_and_the_store_recovers_once_space_is_freed() {
    let Some(tmpfs) = Tmpfs::mount(20) else {
        return;
    };
    let dir = tempfile::tempdir_in(&tmpfs.dir).unwrap();
    let s = TestServer::start_over(dir, 42, |_| {}).await;
    assert_eq!(s.get(None, "/v1/health").await.0, 200);
    let filler = tmpfs.dir.join("filler");
    assert!(fill(&filler) > 0);

    // Sessions with long goals until the store refuses one: each refusal is an answer, and
    // every session answered 201 must survive.
    let goal = "g".repeat(8000);
    let body = json!({"agent_id": "ops-bot", "goal": goal});
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for _ in 0..4000 {
        let (st, v) = s.post(Some(AGENT), "/v1/sessions", &body).await;
        if st == 201 {
            acknowledged.push(v["session_id"].as_str().unwrap().to_owned());
        } else {
            refused = Some((st, v));
            break;
        }
    }
    let (st, v) = refused.expect("a full disk refused no write");
    assert_eq!(st, 503, "the refusal of a write on a full disk: {v}");
    assert_eq!(v["error"], "unavailable", "{v}");

    let (st, health) = s.get(None, "/v1/health").await;
    assert_eq!(
        (st, &health["status"]),
        (503, &json!("unavailable")),
        "{health}"
    );
    assert!(health["store_error"].is_string(), "{health}");
    // Still full: still not ready, and writes still refused.
    assert_eq!(s.get(None, "/v1/health").await.0, 503);
    assert_ne!(s.post(Some(AGENT), "/v1/sessions", &body).await.0, 201);

    std::fs::remove_file(&filler).unwrap();
    // The first write after the space came back reopens the store itself (no health probe).
    let (st, v) = s.post(Some(AGENT), "/v1/sessions", &body).await;
    assert_eq!(st, 201, "a write once space is freed: {v}");
    acknowledged.push(v["session_id"].as_str().unwrap().to_owned());
    let (st, health) = s.get(None, "/v1/health").await;
    assert_eq!((st, &health["status"]), (200, &json!("ok")), "{health}");

    for sid in &acknowledged {
        let path = format!("/v1/sessions/{sid}");
        let (st, v) = s.get(Some(AGENT), &path).await;
        assert_eq!(st, 200, "acknowledged session {sid}: {v}");
        assert_eq!(s.event_types(sid).await, ["session.started"], "{sid}");
        let (st, v) = s
            .post(Some(AGENT), &format!("/v1/traces/{sid}/verify"), &json!({}))
            .await;
        assert_eq!((st, &v["valid"]), (200, &json!(true)), "{sid}: {v}");
    }
    s.stop().await;
    drop(tmpfs);
}

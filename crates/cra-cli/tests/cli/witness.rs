//! `cra witness`: the real server on loopback cosigning real checkpoints of a growing
//! `MemoryTree` and refusing with each status of C2SP `tlog-witness`; its state surviving a
//! restart; concurrent submissions against one old size decided one after the other (a hook
//! pauses one inside the lock and the other reports waiting for it: no sleeps); and the binary's `key generate` and `serve` as users run them.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, Mutex, mpsc};

use cra_cli::cmd::witness::{AddError, HookPoint, WitnessService, start};
use cra_tlog::witness::{AddCheckpoint, origin_hash};
use cra_tlog::{
    Checkpoint, CosignatureSigner, CosignatureVerifier, Ed25519Signer, Hash, MemoryTree, Note,
    Witness, consistency_proof, leaf_hash, root,
};

const ORIGIN: &str = "log.example/cra";
const NOW: u64 = 1_750_000_000;

fn log_key() -> Ed25519Signer {
    Ed25519Signer::from_seed(ORIGIN, &[7; 32]).unwrap()
}

fn cosigner() -> CosignatureSigner {
    CosignatureSigner::from_seed("witness.example/w1", &[42; 32]).unwrap()
}

fn witness() -> Witness {
    let other = Ed25519Signer::from_seed("other.example/log", &[8; 32]).unwrap();
    Witness::new(cosigner(), vec![log_key().verifier(), other.verifier()]).unwrap()
}

fn service(dir: &Path) -> WitnessService {
    WitnessService::open(witness(), dir, Arc::new(|| NOW)).unwrap()
}

/// A tree of `n` leaves; `fork` changes every leaf, so equal sizes have other roots.
fn tree(n: u64, fork: u8) -> MemoryTree {
    let leaves: Vec<Hash> = (0..n)
        .map(|i| {
            let mut data = i.to_be_bytes().to_vec();
            data.push(fork);
            leaf_hash(&data)
        })
        .collect();
    MemoryTree::from_leaf_hashes(&leaves)
}

fn signed(tree: &MemoryTree, size: u64, key: &Ed25519Signer) -> Vec<u8> {
    let cp = Checkpoint::new(key.name(), size, root(tree, size).unwrap()).unwrap();
    cp.sign(key).unwrap().to_text().into_bytes()
}

fn request(tree: &MemoryTree, old: u64, new: u64, key: &Ed25519Signer) -> AddCheckpoint {
    let proof = if old == 0 {
        vec![]
    } else {
        consistency_proof(tree, old, new).unwrap()
    };
    AddCheckpoint {
        old_size: old,
        proof,
        checkpoint: signed(tree, new, key),
    }
}

/// A witness server on loopback, on its own runtime.
pub(crate) struct Server {
    rt: tokio::runtime::Runtime,
    pub(crate) url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    running: Option<cra_cli::cmd::witness::Running>,
}

impl Server {
    pub(crate) fn start(service: WitnessService) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = rt
            .block_on(start(Arc::new(service), "127.0.0.1:0", async move {
                let _ = stopped.await;
            }))
            .unwrap();
        Self {
            rt,
            url: format!("http://{}", running.addr),
            stop: Some(stop),
            running: Some(running),
        }
    }

    fn post(&self, body: Vec<u8>) -> (u16, Option<String>, String) {
        let response = cra_runtime::tls::blocking_http_client()
            .build()
            .unwrap()
            .post(format!("{}/add-checkpoint", self.url))
            .body(body)
            .send()
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, content_type, response.text().unwrap())
    }

    pub(crate) fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(running) = self.running.take() {
            self.rt.block_on(running.wait()).unwrap();
        }
    }
}

/// Verifies a 200 body: one cosignature line by our cosigner over `checkpoint`.
fn assert_cosigned(checkpoint: &[u8], body: &str, verifier: &CosignatureVerifier) {
    assert!(
        body.starts_with("\u{2014} witness.example/w1 ") && body.ends_with('\n'),
        "{body:?}"
    );
    assert_eq!(body.matches('\n').count(), 1);
    let mut with = checkpoint.to_vec();
    with.extend_from_slice(body.as_bytes());
    let note = Note::parse(&with).unwrap();
    assert_eq!(verifier.verify_note(&note), Ok(NOW));
}

#[test]
fn the_witness_cosigns_a_growing_log_and_refuses_per_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(service(dir.path()));
    let full = tree(40, 0);
    let verifier = cosigner().verifier();
    let key = log_key();

    // 200: first sight (old 0, no proof), then growth with a consistency proof, then the same size
    for (old, new) in [(0, 5), (5, 12), (12, 12)] {
        let r = request(&full, old, new, &key);
        let (status, _, body) = server.post(r.to_body());
        assert_eq!(status, 200, "{old} -> {new}: {body}");
        assert_cosigned(&r.checkpoint, &body, &verifier);
    }

    // the monitoring endpoint serves the latest checkpoint with the log's and our signatures
    let url = format!("{}/{}/checkpoint", server.url, origin_hash(ORIGIN));
    let latest = crate::http_get(url).unwrap();
    assert_eq!(latest.status().as_u16(), 200);
    let note = Note::parse(latest.text().unwrap().as_bytes()).unwrap();
    assert_eq!(verifier.verify_note(&note), Ok(NOW));
    assert!(note.text().starts_with(&format!("{ORIGIN}\n12\n")));
    let other = format!(
        "{}/{}/checkpoint",
        server.url,
        origin_hash("other.example/log")
    );
    assert_eq!(crate::http_get(other).unwrap().status().as_u16(), 404);

    // 409: an old size that is not the latest, with the latest size as text/x.tlog.size
    let (status, content_type, body) = server.post(request(&full, 5, 20, &key).to_body());
    assert_eq!(
        (status, content_type.as_deref(), body.as_str()),
        (409, Some("text/x.tlog.size"), "12\n")
    );

    // 422: a flipped byte of the consistency proof
    let mut flipped = request(&full, 12, 20, &key);
    flipped.proof[1][17] ^= 0x10;
    let (status, _, body) = server.post(flipped.to_body());
    assert_eq!(status, 422, "{body}");

    // 403: signed by another key of the same name; 404: a log this witness does not know
    let impostor = Ed25519Signer::from_seed(ORIGIN, &[9; 32]).unwrap();
    assert_eq!(
        server.post(request(&full, 12, 20, &impostor).to_body()).0,
        403
    );
    let stranger = Ed25519Signer::from_seed("stranger.example/log", &[3; 32]).unwrap();
    assert_eq!(
        server.post(request(&full, 0, 20, &stranger).to_body()).0,
        404
    );

    // 400: malformed bodies, and an old size above the checkpoint's
    assert_eq!(server.post(b"old 12\n".to_vec()).0, 400);
    assert_eq!(server.post(b"not a request\n\n".to_vec()).0, 400);
    let mut above = request(&full, 0, 20, &key);
    above.old_size = 21;
    assert_eq!(server.post(above.to_body()).0, 400);

    // none of the refusals moved the state; a good request still goes through
    let r = request(&full, 12, 40, &key);
    let (status, _, body) = server.post(r.to_body());
    assert_eq!(status, 200, "{body}");
    assert_cosigned(&r.checkpoint, &body, &verifier);

    // only POST cosigns
    let get = crate::http_get(format!("{}/add-checkpoint", server.url)).unwrap();
    assert_eq!(get.status().as_u16(), 405);
    server.stop();

    // the state is on disk: a restarted witness still knows size 40 and refuses a rollback
    let again = service(dir.path());
    assert_eq!(again.latest_size(ORIGIN), Some(40));
    let rollback = again.add_checkpoint(&request(&full, 12, 20, &key).to_body());
    assert_eq!(rollback.as_ref().map_err(AddError::status).err(), Some(409));
    assert!(
        !dir.path()
            .join(format!("{}.tmp", origin_hash(ORIGIN)))
            .exists()
    );
}

#[test]
fn a_corrupt_state_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(origin_hash(ORIGIN)), b"garbage").unwrap();
    let err = WitnessService::open(witness(), dir.path(), Arc::new(|| NOW)).unwrap_err();
    assert!(err.to_string().contains("roll back"), "{err}");
}

#[test]
fn a_failed_write_cosigns_nothing_and_keeps_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let witness = service(dir.path());
    let full = tree(8, 0);
    let key = log_key();
    assert!(
        witness
            .add_checkpoint(&request(&full, 0, 3, &key).to_body())
            .is_ok()
    );
    // a directory where the temporary file goes: the write fails
    std::fs::create_dir(dir.path().join(format!("{}.tmp", origin_hash(ORIGIN)))).unwrap();
    let failed = witness.add_checkpoint(&request(&full, 3, 8, &key).to_body());
    assert_eq!(failed.as_ref().map_err(AddError::status).err(), Some(500));
    assert_eq!(witness.latest_size(ORIGIN), Some(3));
    // the file on disk is still the size-3 checkpoint
    assert_eq!(service(dir.path()).latest_size(ORIGIN), Some(3));
}

/// Submission A takes the origin's lock and is paused after deciding, before persisting; B,
/// against the same old size, is then submitted and must wait for the lock (it reports
/// `Waiting`; a witness that decided outside the lock would answer B first); A is released.
/// Returns both statuses and the stored size.
fn race(a: AddCheckpoint, b: AddCheckpoint) -> (u16, u16, Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let (events, seen) = mpsc::channel::<String>();
    let release_a = Arc::new(Barrier::new(2));
    let a_root = *Checkpoint::parse(Note::parse(&a.checkpoint).unwrap().text())
        .unwrap()
        .root();
    let hook = {
        let (events, release_a) = (Mutex::new(events.clone()), release_a.clone());
        Arc::new(move |point: HookPoint, s: &cra_tlog::witness::Submission| {
            let who = if *s.checkpoint.root() == a_root {
                "A"
            } else {
                "B"
            };
            match (point, who) {
                (HookPoint::Decided, "A") => {
                    events.lock().unwrap().send("A decided".into()).unwrap();
                    release_a.wait();
                }
                (HookPoint::Waiting, _) => {
                    events
                        .lock()
                        .unwrap()
                        .send(format!("{who} waiting"))
                        .unwrap();
                }
                _ => {}
            }
        })
    };
    let service = Arc::new(service(dir.path()).with_hook(hook));
    let status = |r: Result<_, AddError>| r.map_or_else(|e| e.status(), |_| 200);
    let thread_a = {
        let service = service.clone();
        std::thread::spawn(move || status(service.add_checkpoint(&a.to_body())))
    };
    assert_eq!(seen.recv().unwrap(), "A decided");
    let thread_b = {
        let (service, events) = (service.clone(), events.clone());
        std::thread::spawn(move || {
            let got = status(service.add_checkpoint(&b.to_body()));
            let _ = events.send(format!("B done {got}"));
            got
        })
    };
    assert_eq!(
        seen.recv().unwrap(),
        "B waiting",
        "B was decided while A held its decision"
    );
    release_a.wait();
    let (a, b) = (thread_a.join().unwrap(), thread_b.join().unwrap());
    assert_eq!(seen.recv().unwrap(), format!("B done {b}"));
    (a, b, service.latest_size(ORIGIN))
}

#[test]
fn concurrent_submissions_against_one_old_size_are_decided_one_after_the_other() {
    let key = log_key();
    // two roots for one size (a forked log): only the first is cosigned
    let (x, y) = (tree(10, 0), tree(10, 1));
    assert_eq!(
        race(request(&x, 0, 10, &key), request(&y, 0, 10, &key)),
        (200, 409, Some(10))
    );
    // a larger size then a smaller one: the stored size never goes back
    let (big, small) = (tree(20, 0), tree(10, 0));
    assert_eq!(
        race(request(&big, 0, 20, &key), request(&small, 0, 10, &key)),
        (200, 409, Some(20))
    );
}

#[test]
fn key_generate_and_serve_run_as_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("witness.key");
    let cra = env!("CARGO_BIN_EXE_cra");
    let out = Command::new(cra)
        .args([
            "witness",
            "key",
            "generate",
            "--name",
            "witness.example/w9",
            "-o",
            "json",
            "--out",
        ])
        .arg(&key_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let vkey = json["vkey"].as_str().unwrap().to_owned();
    let verifier = CosignatureVerifier::parse(&vkey).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // never overwrites a key
    let again = Command::new(cra)
        .args([
            "witness",
            "key",
            "generate",
            "--name",
            "witness.example/w9",
            "--out",
        ])
        .arg(&key_file)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));

    let key = log_key();
    let mut child = Command::new(cra)
        .args(["witness", "serve", "--addr", "127.0.0.1:0", "--log"])
        .arg(key.verifier().to_key_string())
        .arg("--state")
        .arg(dir.path().join("state"))
        .arg("--key")
        .arg(&key_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut cosigning_as = None;
    let url = loop {
        let Some(line) = lines.next() else {
            let out = child.wait_with_output().unwrap();
            panic!(
                "cra witness serve stopped: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let line = line.unwrap();
        if let Some(v) = line.strip_prefix("cra witness: cosigning as ") {
            cosigning_as = Some(v.to_owned());
        }
        if let Some(a) = line.strip_prefix("cra witness: listening on ") {
            break a.to_owned();
        }
    };
    assert_eq!(cosigning_as.as_deref(), Some(vkey.as_str()));
    let full = tree(3, 0);
    let r = request(&full, 0, 3, &key);
    let response = cra_runtime::tls::blocking_http_client()
        .build()
        .unwrap()
        .post(format!("{url}/add-checkpoint"))
        .body(r.to_body())
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut with = r.checkpoint.clone();
    with.extend_from_slice(response.text().unwrap().as_bytes());
    let timestamp = verifier.verify_note(&Note::parse(&with).unwrap()).unwrap();
    assert!(
        timestamp > 1_700_000_000,
        "the system clock's time: {timestamp}"
    );
    crate::terminate(child);
}

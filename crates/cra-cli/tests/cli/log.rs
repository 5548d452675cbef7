//! `cra log watch` against a log server that misbehaves on purpose (a real HTTP server on
//! loopback serving signed checkpoints and proofs of real trees, swapped by the test), and
//! against a real `cra serve` whose log grows: it passes consistent growth and exits 2, with
//! both checkpoints, for (a) a rewritten tree of the same size, (b) a smaller tree, (c) a proof
//! with a flipped byte, (d) a checkpoint signed by another key.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::routing::get;
use cra_cli::OutputFormat;
use cra_cli::cmd::log::{WatchArgs, WatchOutcome, watch_once};
use cra_tlog::{Checkpoint, Ed25519Signer, Hash, MemoryTree, consistency_proof, leaf_hash, root};

const ORIGIN: &str = "log.example/cra";

/// What the hostile server serves: a checkpoint note and a consistency proof (hex) to give
/// whatever sizes are asked.
#[derive(Default)]
struct Served {
    checkpoint: String,
    proof: Vec<String>,
}

type Shared = Arc<Mutex<Served>>;

/// Starts the server on its own runtime thread; answers its base URL.
fn serve(served: Shared) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = Router::new()
                .route(
                    "/v1/log/checkpoint",
                    get(|State(s): State<Shared>| async move { s.lock().unwrap().checkpoint.clone() }),
                )
                .route(
                    "/v1/log/proof/consistency",
                    get(
                        |State(s): State<Shared>,
                         Query(_): Query<std::collections::HashMap<String, String>>| async move {
                            axum::Json(serde_json::json!({"hashes": s.lock().unwrap().proof.clone()}))
                        },
                    ),
                )
                .with_state(served);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}

fn key(seed: u8) -> Ed25519Signer {
    Ed25519Signer::from_seed(ORIGIN, &[seed; 32]).unwrap()
}

/// A tree of `n` leaves; `fork` changes every leaf.
fn tree(n: u64, fork: u8) -> MemoryTree {
    let leaves: Vec<Hash> = (0..n)
        .map(|i| leaf_hash(&[&i.to_be_bytes()[..], &[fork]].concat()))
        .collect();
    MemoryTree::from_leaf_hashes(&leaves)
}

fn note(tree: &MemoryTree, size: u64, key: &Ed25519Signer) -> String {
    Checkpoint::new(ORIGIN, size, root(tree, size).unwrap())
        .unwrap()
        .sign(key)
        .unwrap()
        .to_text()
}

fn proof_hex(tree: &MemoryTree, old: u64, new: u64) -> Vec<String> {
    cra_tlog::proof::proof_to_hex(&consistency_proof(tree, old, new).unwrap())
}

fn args(url: &str, state: &std::path::Path) -> WatchArgs {
    WatchArgs {
        url: url.to_owned(),
        state: state.to_owned(),
        log_key: Some(key(1).verifier().to_key_string()),
        every: None,
        output: OutputFormat::Json,
    }
}

/// The watcher seeing `first` (consistent), then what `tamper` makes the server serve.
fn finding_after(tamper: impl FnOnce(&mut Served)) -> (String, WatchOutcome) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("watch.json");
    let honest = tree(40, 0);
    let served: Shared = Arc::new(Mutex::new(Served {
        checkpoint: note(&honest, 20, &key(1)),
        proof: Vec::new(),
    }));
    let url = serve(served.clone());
    assert!(matches!(
        watch_once(&args(&url, &state)),
        WatchOutcome::Consistent {
            from: None,
            to: 20,
            ..
        }
    ));
    tamper(&mut served.lock().unwrap());
    let before = std::fs::read_to_string(&state).unwrap();
    let outcome = watch_once(&args(&url, &state));
    if matches!(outcome, WatchOutcome::Inconsistent(_)) {
        assert_eq!(
            std::fs::read_to_string(&state).unwrap(),
            before,
            "a failed check keeps the state"
        );
    }
    (before, outcome)
}

fn kind(outcome: &WatchOutcome) -> &'static str {
    match outcome {
        WatchOutcome::Inconsistent(f) => {
            assert!(
                f.previous.is_some() && !f.served.is_empty(),
                "both checkpoints are shown"
            );
            f.kind
        }
        WatchOutcome::Consistent { .. } => "consistent",
        WatchOutcome::Failed(e) => panic!("the check could not run: {e}"),
    }
}

#[test]
fn consistent_growth_passes_and_moves_the_state_on() {
    let honest = tree(40, 0);
    let (_, outcome) = finding_after(|s| {
        s.checkpoint = note(&honest, 33, &key(1));
        s.proof = proof_hex(&honest, 20, 33);
    });
    assert!(
        matches!(
            outcome,
            WatchOutcome::Consistent {
                from: Some(20),
                to: 33,
                ..
            }
        ),
        "{outcome:?}"
    );
}

#[test]
fn a_rewritten_tree_of_the_same_size_is_caught() {
    let (_, outcome) = finding_after(|s| s.checkpoint = note(&tree(40, 9), 20, &key(1)));
    assert_eq!(kind(&outcome), "rewritten_tree");
}

#[test]
fn a_smaller_tree_is_caught() {
    let (_, outcome) = finding_after(|s| s.checkpoint = note(&tree(40, 0), 12, &key(1)));
    assert_eq!(kind(&outcome), "smaller_tree");
}

#[test]
fn a_proof_with_a_flipped_byte_is_caught() {
    let honest = tree(40, 0);
    let (_, outcome) = finding_after(|s| {
        s.checkpoint = note(&honest, 33, &key(1));
        let mut proof = proof_hex(&honest, 20, 33);
        // Flip the low bit of the first byte.
        let mut bytes = cra_tlog::hash::from_hex(&proof[0]).unwrap();
        bytes[0] ^= 1;
        proof[0] = cra_tlog::hash::to_hex(&bytes);
        s.proof = proof;
    });
    assert_eq!(kind(&outcome), "bad_consistency_proof");
}

#[test]
fn a_checkpoint_signed_by_another_key_is_caught() {
    let honest = tree(40, 0);
    let (_, outcome) = finding_after(|s| {
        s.checkpoint = note(&honest, 33, &key(2));
        s.proof = proof_hex(&honest, 20, 33);
    });
    assert_eq!(kind(&outcome), "bad_signature");
}

/// A grown tree whose proof is for another old tree (a fork that kept the size growing) fails
/// the consistency proof too.
#[test]
fn a_forked_tree_that_grew_is_caught() {
    let fork = tree(40, 5);
    let (_, outcome) = finding_after(|s| {
        s.checkpoint = note(&fork, 33, &key(1));
        s.proof = proof_hex(&fork, 20, 33);
    });
    assert_eq!(kind(&outcome), "bad_consistency_proof");
}

/// Invariant: `--every` checks again and again while the log stays consistent (one report per
/// check) and exits 2 at the first check that finds it is not: the binary is run as an
/// operator would, and the test waits on its reports, never on a clock.
#[test]
fn watching_every_second_goes_on_while_consistent_and_exits_2_when_not() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let honest = tree(40, 0);
    let served: Shared = Arc::new(Mutex::new(Served {
        checkpoint: note(&honest, 20, &key(1)),
        proof: Vec::new(),
    }));
    let url = serve(served.clone());
    let mut child = crate::Reaped::new(
        std::process::Command::new(env!("CARGO_BIN_EXE_cra"))
            .args(["log", "watch", "--url", &url, "--every", "1", "-o", "json"])
            .arg("--state")
            .arg(dir.path().join("watch.json"))
            .args(["--log-key", &key(1).verifier().to_key_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut reports = std::io::BufReader::new(child.child().stdout.take().unwrap()).lines();
    // Each change is seen at the next check or the one after: a watch that goes on past 20
    // reports has missed one (and is killed with the test).
    let mut left = 20;
    let mut next = || -> serde_json::Value {
        left -= 1;
        assert!(left > 0, "the watch missed a change");
        serde_json::from_str(&reports.next().expect("a report").unwrap()).unwrap()
    };
    assert_eq!(next()["consistent"], true);
    // Grown consistently: the next check passes and the watch goes on.
    {
        let mut s = served.lock().unwrap();
        s.checkpoint = note(&honest, 30, &key(1));
        s.proof = proof_hex(&honest, 20, 30);
    }
    let mut grown = next();
    while grown["to"] != 30 {
        assert_eq!(grown["consistent"], true, "{grown}");
        grown = next();
    }
    served.lock().unwrap().checkpoint = note(&honest, 25, &key(1));
    let mut found = next();
    while found["consistent"] == true {
        found = next();
    }
    assert!(found.to_string().contains("smaller"), "{found}");
    let status = child.child().wait().unwrap();
    assert_eq!(status.code(), Some(2), "{found}");
}

/// A log rotating its key signs each checkpoint with both keys (`log.rotation_key_files`): a
/// watcher pinned to the old key takes `--log-key NEW` only from a checkpoint both keys signed,
/// checks it against the last one seen as usual, and pins the new key from then on; a
/// checkpoint signed by the new key alone never moves the pin.
#[test]
fn a_watcher_follows_a_key_rotation_only_through_a_checkpoint_both_keys_signed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("watch.json");
    let honest = tree(40, 0);
    let served: Shared = Arc::new(Mutex::new(Served {
        checkpoint: note(&honest, 20, &key(1)),
        proof: Vec::new(),
    }));
    let url = serve(served.clone());
    assert_eq!(
        kind_or_consistent(&watch_once(&args(&url, &state))),
        "consistent"
    );
    let pinned = |state: &std::path::Path| {
        let text = std::fs::read_to_string(state).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["log_key"].as_str().unwrap().to_owned()
    };
    let (old_key, new_key) = (
        key(1).verifier().to_key_string(),
        key(2).verifier().to_key_string(),
    );
    let rotated = WatchArgs {
        log_key: Some(new_key.clone()),
        ..args(&url, &state)
    };

    // Signed by the new key alone: refused, and the old key stays pinned.
    {
        let mut s = served.lock().unwrap();
        s.checkpoint = note(&honest, 30, &key(2));
        s.proof = proof_hex(&honest, 20, 30);
    }
    match watch_once(&rotated) {
        WatchOutcome::Failed(e) => assert!(
            e.contains("not signed by the pinned key") && e.contains("rotating its key"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(pinned(&state), old_key);

    // Signed by both: consistent with the last checkpoint seen, and the new key is pinned.
    let mut both = Checkpoint::new(ORIGIN, 30, root(&honest, 30).unwrap())
        .unwrap()
        .sign(&key(1))
        .unwrap();
    both.sign(&key(2)).unwrap();
    served.lock().unwrap().checkpoint = both.to_text();
    assert!(
        matches!(
            watch_once(&rotated),
            WatchOutcome::Consistent {
                from: Some(20),
                to: 30,
                ..
            }
        ),
        "a checkpoint both keys signed moves the pin"
    );
    assert_eq!(pinned(&state), new_key);

    // From then on the new key alone is what passes; the old one is no longer pinned.
    {
        let mut s = served.lock().unwrap();
        s.checkpoint = note(&honest, 35, &key(2));
        s.proof = proof_hex(&honest, 30, 35);
    }
    let watching = WatchArgs {
        log_key: None,
        ..args(&url, &state)
    };
    assert_eq!(kind_or_consistent(&watch_once(&watching)), "consistent");
    assert!(matches!(
        watch_once(&args(&url, &state)),
        WatchOutcome::Failed(_)
    ));
}

/// The kind of a finding, or `consistent`.
fn kind_or_consistent(outcome: &WatchOutcome) -> &'static str {
    match outcome {
        WatchOutcome::Consistent { .. } => "consistent",
        other => kind(other),
    }
}

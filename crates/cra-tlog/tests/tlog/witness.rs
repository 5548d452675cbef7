//! The witness (`cra_tlog::witness`) and `cosignature/v1` from a log's side: real checkpoints of a
//! growing `MemoryTree`, submitted as `add-checkpoint` bodies; every refusal of the spec with its
//! status; every flipped byte of a request refused; and azul's `signed_note` reading our
//! cosignature line as a note signature (it has no `cosignature/v1` verifier of its own).

use cra_tlog::witness::{Accepted, AddCheckpoint, LogState, SIZE_CONTENT_TYPE, origin_hash};
use cra_tlog::{
    Checkpoint, CosignatureSigner, Ed25519Signer, MemoryTree, Note, Witness, WitnessError,
    consistency_proof, empty_root, root,
};
use signed_note::{Note as AzulNote, StandardVerifier, VerifierList};

use crate::support::{leaves, signer};

const ORIGIN: &str = "log.example/cra";
const NOW: u64 = 1_700_000_000;

fn cosigner() -> CosignatureSigner {
    CosignatureSigner::from_seed("witness.example/w1", &[42; 32]).unwrap()
}

fn witness() -> Witness {
    let other = signer("other.example/log", 8).verifier();
    Witness::new(cosigner(), vec![signer(ORIGIN, 7).verifier(), other]).unwrap()
}

fn tree(n: u64) -> MemoryTree {
    MemoryTree::from_leaf_hashes(&leaves(n))
}

/// The signed checkpoint note of the first `size` leaves of `tree`, by `log`.
fn signed(tree: &MemoryTree, size: u64, log: &Ed25519Signer) -> Vec<u8> {
    let cp = Checkpoint::new(log.name(), size, root(tree, size).unwrap()).unwrap();
    cp.sign(log).unwrap().to_text().into_bytes()
}

/// The add-checkpoint body from `old` to `new` over `tree`, signed by the log's key.
fn body(tree: &MemoryTree, old: u64, new: u64) -> Vec<u8> {
    let proof = if old == 0 {
        Vec::new()
    } else {
        consistency_proof(tree, old, new).unwrap()
    };
    AddCheckpoint {
        old_size: old,
        proof,
        checkpoint: signed(tree, new, &signer(ORIGIN, 7)),
    }
    .to_body()
}

fn submit(w: &Witness, body: &[u8], latest: Option<&LogState>) -> Result<Accepted, WitnessError> {
    let submission = w.open(body)?;
    w.decide(&submission, latest, NOW)
}

fn status(w: &Witness, body: &[u8], latest: Option<&LogState>) -> u16 {
    match submit(w, body, latest) {
        Ok(_) => 200,
        Err(e) => e.status(),
    }
}

#[test]
fn a_growing_log_is_cosigned_step_by_step() {
    let w = witness();
    let full = tree(300);
    let verifier = cosigner().verifier();
    let mut latest: Option<LogState> = None;
    let mut old = 0;
    for size in [0, 1, 5, 5, 8, 17, 256, 300] {
        let request = body(&full, old, size);
        let accepted =
            submit(&w, &request, latest.as_ref()).unwrap_or_else(|e| panic!("{size}: {e}"));
        assert_eq!(
            accepted.state,
            LogState {
                size,
                root: root(&full, size).unwrap()
            }
        );
        // the response is one cosignature line; appended to the checkpoint it verifies
        let line = accepted.response_body();
        assert!(line.starts_with("\u{2014} witness.example/w1 ") && line.ends_with('\n'));
        let checkpoint = signed(&full, size, &signer(ORIGIN, 7));
        let mut with = checkpoint.clone();
        with.extend_from_slice(line.as_bytes());
        let note = Note::parse(&with).unwrap();
        assert_eq!(verifier.verify_note(&note), Ok(NOW));
        assert_eq!(note, accepted.cosigned);
        latest = Some(accepted.state);
        old = size;
    }
    assert_eq!(
        origin_hash("example.com/behind-the-sofa").len(),
        64,
        "lowercase hex SHA-256"
    );
}

#[test]
fn every_refusal_has_the_spec_status() {
    let w = witness();
    let full = tree(40);
    let at = |size: u64| LogState {
        size,
        root: root(&full, size).unwrap(),
    };
    let good = body(&full, 10, 20);
    assert_eq!(status(&w, &good, Some(&at(10))), 200);

    // 400: malformed bodies
    let text = String::from_utf8(good.clone()).unwrap();
    let checkpoint = signed(&full, 20, &signer(ORIGIN, 7));
    let cp_text = String::from_utf8(checkpoint.clone()).unwrap();
    for bad in [
        String::new(),
        "old 10".to_owned(),
        text.replacen("old 10", "old 010", 1),
        text.replacen("old 10", "old  10", 1),
        text.replacen("old 10", "Old 10", 1),
        text.replacen("old 10", "old -1", 1),
        text.replacen("old 10", "old 18446744073709551616", 1),
        format!("old 0\n{cp_text}"),
        format!("old 0\nAAAA\n\n{cp_text}"),
        "old 0\n\n".to_owned(),
        "old 0\n\nnot a note\n".to_owned(),
        format!("old 0\n\n{}", cp_text.replacen("\n20\n", "\n020\n", 1)),
        format!(
            "old 0\n{}\n{cp_text}",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n".repeat(64)
        ),
    ] {
        let got = submit(&w, bad.as_bytes(), Some(&at(10)));
        assert_eq!(
            got.as_ref().map_err(WitnessError::status),
            Err(400),
            "{bad:?}: {got:?}"
        );
    }
    // 63 proof lines are allowed by the parser (the proof itself is then wrong: 422)
    let many = format!(
        "old 10\n{}\n{cp_text}",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n".repeat(63)
    );
    assert_eq!(status(&w, many.as_bytes(), Some(&at(10))), 422);

    // 404: an origin this witness does not know, whatever its signature
    let stranger = signer("stranger.example/log", 3);
    let unknown = AddCheckpoint {
        old_size: 0,
        proof: vec![],
        checkpoint: signed(&full, 20, &stranger),
    };
    assert_eq!(status(&w, &unknown.to_body(), None), 404);

    // 403: signed only by an unknown key of the right name; a known key's signature broken
    let impostor = Ed25519Signer::from_seed(ORIGIN, &[99; 32]).unwrap();
    let forged = AddCheckpoint {
        old_size: 10,
        proof: consistency_proof(&full, 10, 20).unwrap(),
        checkpoint: signed(&full, 20, &impostor),
    };
    assert_eq!(status(&w, &forged.to_body(), Some(&at(10))), 403);
    let mut broken = Note::parse(&checkpoint).unwrap().to_text();
    let sig_at = broken.rfind(' ').unwrap() + 20;
    broken.replace_range(
        sig_at..=sig_at,
        if &broken[sig_at..=sig_at] == "A" {
            "B"
        } else {
            "A"
        },
    );
    let broken = AddCheckpoint {
        checkpoint: broken.into_bytes(),
        ..forged.clone()
    };
    assert_eq!(status(&w, &broken.to_body(), Some(&at(10))), 403);
    // an unknown origin is 404 before its signature is looked at (the spec's order)
    let mut unknown_forged = unknown.clone();
    unknown_forged.checkpoint = signed(
        &full,
        20,
        &Ed25519Signer::from_seed("stranger.example/log", &[1; 32]).unwrap(),
    );
    assert_eq!(status(&w, &unknown_forged.to_body(), None), 404);

    // 400: old size above the checkpoint's (after the signature checks)
    let above = AddCheckpoint {
        old_size: 21,
        proof: vec![],
        checkpoint: checkpoint.clone(),
    };
    assert_eq!(status(&w, &above.to_body(), Some(&at(21))), 400);

    // 409: the old size is not the latest cosigned, with the latest size as the body
    let conflict = submit(&w, &good, Some(&at(12))).unwrap_err();
    assert_eq!(conflict.status(), 409);
    assert_eq!(conflict.conflict_body().as_deref(), Some("12\n"));
    assert_eq!(SIZE_CONTENT_TYPE, "text/x.tlog.size");
    let never = submit(&w, &good, None).unwrap_err();
    assert_eq!(
        (never.status(), never.conflict_body()),
        (409, Some("0\n".to_owned()))
    );
    // a client that knows nothing asks with old 0 and learns the size
    let ask = submit(&w, &body(&full, 0, 20), Some(&at(10))).unwrap_err();
    assert_eq!(ask.conflict_body().as_deref(), Some("10\n"));

    // 422: a proof that does not verify, of the wrong length, or from a root this witness did
    // not cosign; a non-empty proof from size 0; an empty tree with another root; the same size
    // with another root
    let mut wrong = AddCheckpoint::parse(&good).unwrap();
    wrong.proof[0][0] ^= 1;
    assert_eq!(status(&w, &wrong.to_body(), Some(&at(10))), 422);
    wrong.proof = consistency_proof(&full, 10, 20).unwrap();
    wrong.proof.pop();
    assert_eq!(status(&w, &wrong.to_body(), Some(&at(10))), 422);
    let forked = LogState {
        size: 10,
        root: [7; 32],
    };
    assert_eq!(status(&w, &good, Some(&forked)), 422);
    let from_empty = AddCheckpoint {
        old_size: 0,
        proof: vec![[1; 32]],
        checkpoint: checkpoint.clone(),
    };
    assert_eq!(status(&w, &from_empty.to_body(), None), 422);
    let log = signer(ORIGIN, 7);
    let empty_bad = Checkpoint::new(ORIGIN, 0, [3; 32])
        .unwrap()
        .sign(&log)
        .unwrap();
    let empty_bad = AddCheckpoint {
        old_size: 0,
        proof: vec![],
        checkpoint: empty_bad.to_text().into_bytes(),
    };
    assert_eq!(status(&w, &empty_bad.to_body(), None), 422);
    let empty_good = Checkpoint::new(ORIGIN, 0, empty_root())
        .unwrap()
        .sign(&log)
        .unwrap();
    let empty_good = AddCheckpoint {
        checkpoint: empty_good.to_text().into_bytes(),
        ..empty_bad
    };
    assert_eq!(status(&w, &empty_good.to_body(), None), 200);
    let same_size = AddCheckpoint {
        old_size: 20,
        proof: vec![],
        checkpoint: checkpoint.clone(),
    };
    assert_eq!(status(&w, &same_size.to_body(), Some(&at(20))), 200);
    let other_root = LogState {
        size: 20,
        root: [9; 32],
    };
    assert_eq!(status(&w, &same_size.to_body(), Some(&other_root)), 422);

    // a clock the cosignature cannot carry is the witness's fault (500), never a cosignature
    let sub = w.open(&good).unwrap();
    assert_eq!(
        w.decide(&sub, Some(&at(10)), 0)
            .map_err(|e| e.status())
            .err(),
        Some(500)
    );
}

#[test]
fn a_flipped_byte_is_never_cosigned() {
    let w = witness();
    let full = tree(40);
    let latest = LogState {
        size: 13,
        root: root(&full, 13).unwrap(),
    };
    let good = body(&full, 13, 37);
    assert_eq!(status(&w, &good, Some(&latest)), 200);
    for i in 0..good.len() {
        for bit in [0x01, 0x20, 0x80] {
            let mut bad = good.clone();
            bad[i] ^= bit;
            let got = submit(&w, &bad, Some(&latest));
            assert!(got.is_err(), "byte {i} ^ {bit:#04x} was cosigned");
        }
    }
}

#[test]
fn azul_reads_our_cosignature_as_a_note_signature() {
    // azul's signed_note has no cosignature/v1 verifier: what it can check is that the line we
    // return is a well-formed signature of the note, by a key it does not know, beside the
    // log's signature it verifies.
    let w = witness();
    let full = tree(9);
    let accepted = submit(&w, &body(&full, 0, 9), None).unwrap();
    let text = accepted.cosigned.to_text();
    let note = AzulNote::from_bytes(text.as_bytes()).unwrap();
    let log_key = signer(ORIGIN, 7).verifier().to_key_string();
    let list = VerifierList::new(vec![Box::new(StandardVerifier::new(&log_key).unwrap())]);
    let (verified, unverified) = note.verify(&list).unwrap();
    assert_eq!((verified.len(), unverified.len()), (1, 1));
    assert_eq!(note.to_bytes(), text.as_bytes());
}

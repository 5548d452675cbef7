//! Tampering: every single flipped byte of a proof hash, of a signed checkpoint (its lines and
//! its signature lines) and of a tlog proof fails verification, and a changed tree size fails
//! through the signature.

use cra_tlog::{
    Checkpoint, CheckpointError, MemoryTree, NoteError, TlogProof, Verifiers, consistency_proof,
    inclusion_proof, root, verify_consistency, verify_inclusion,
};

use crate::support::{leaves, signer};

const ORIGIN: &str = "log.example/cra";

/// Every byte of every hash, flipped one bit at a time: 8 flips a byte.
fn flips(proof: &[[u8; 32]]) -> impl Iterator<Item = Vec<[u8; 32]>> + '_ {
    (0..proof.len()).flat_map(move |h| {
        (0..32).flat_map(move |b| {
            (0..8).map(move |bit| {
                let mut tampered = proof.to_vec();
                tampered[h][b] ^= 1 << bit;
                tampered
            })
        })
    })
}

#[test]
fn every_flipped_bit_of_an_inclusion_proof_fails() {
    let all = leaves(23);
    let tree = MemoryTree::from_leaf_hashes(&all);
    for (index, size) in [(0, 23), (13, 23), (22, 23), (7, 8), (4, 5)] {
        let root_n = root(&tree, size).expect("root");
        let proof = inclusion_proof(&tree, index, size).expect("proof");
        let leaf = &all[index as usize];
        assert_eq!(verify_inclusion(leaf, index, size, &proof, &root_n), Ok(()));
        for tampered in flips(&proof) {
            assert!(verify_inclusion(leaf, index, size, &tampered, &root_n).is_err());
        }
        if index + 1 < size {
            assert!(verify_inclusion(leaf, index + 1, size, &proof, &root_n).is_err());
        }
        // (size + 1 can share the proof's shape: the size is bound by the signed checkpoint)
        assert!(verify_inclusion(leaf, index, size * 2, &proof, &root_n).is_err());
        assert!(verify_inclusion(leaf, index, size / 2, &proof, &root_n).is_err());
    }
}

#[test]
fn every_flipped_bit_of_a_consistency_proof_fails() {
    let tree = MemoryTree::from_leaf_hashes(&leaves(23));
    for (old, new) in [(1, 23), (6, 23), (8, 23), (22, 23), (3, 8)] {
        let (r1, r2) = (
            root(&tree, old).expect("old"),
            root(&tree, new).expect("new"),
        );
        let proof = consistency_proof(&tree, old, new).expect("proof");
        assert_eq!(verify_consistency(old, new, &r1, &r2, &proof), Ok(()));
        for tampered in flips(&proof) {
            assert!(verify_consistency(old, new, &r1, &r2, &tampered).is_err());
        }
        assert!(verify_consistency(old + 1, new, &r1, &r2, &proof).is_err());
        assert!(verify_consistency(old, new * 2, &r1, &r2, &proof).is_err());
        assert!(verify_consistency(old, new / 2, &r1, &r2, &proof).is_err());
        assert!(verify_consistency(old, new, &r2, &r1, &proof).is_err());
    }
}

fn signed_checkpoint(size: u64) -> (String, Verifiers) {
    let tree = MemoryTree::from_leaf_hashes(&leaves(size));
    let log = signer(ORIGIN, 4);
    let cp = Checkpoint::with_extensions(ORIGIN, size, tree.root(), vec!["ext".into()])
        .expect("checkpoint");
    let note = cp.sign(&log).expect("sign");
    let mut text = note.to_text();
    // a second, unknown signature (a witness): flipping it must not make the note verify either
    let witness = signer("witness.example", 5);
    let mut cosigned = cra_tlog::Note::parse(text.as_bytes()).expect("parse");
    cosigned.sign(&witness).expect("cosign");
    text = cosigned.to_text();
    (
        text,
        Verifiers::new(vec![log.verifier()]).expect("verifiers"),
    )
}

#[test]
fn every_flipped_bit_of_a_signed_checkpoint_fails_or_leaves_it_unchanged() {
    let (text, known) = signed_checkpoint(1234);
    let (original, _) = Checkpoint::open(text.as_bytes(), ORIGIN, &known).expect("opens");
    let witness_line = text
        .rfind("\u{2014} witness.example")
        .expect("witness line");
    for i in 0..text.len() {
        for bit in 0..8 {
            let mut bytes = text.clone().into_bytes();
            bytes[i] ^= 1 << bit;
            let opened = Checkpoint::open(&bytes, ORIGIN, &known);
            if i >= witness_line {
                // the unknown witness's line: it is ignored, or it breaks the note's form
                assert!(
                    opened.as_ref().map_or(true, |(c, _)| c == &original),
                    "byte {i}"
                );
            } else {
                assert!(opened.is_err(), "byte {i} bit {bit} still opens");
            }
        }
    }
}

#[test]
fn a_changed_size_fails_through_the_signature() {
    let (text, known) = signed_checkpoint(1234);
    for other in ["1235", "1233", "0", "18446744073709551615"] {
        let forged = text.replacen("\n1234\n", &format!("\n{other}\n"), 1);
        assert!(matches!(
            Checkpoint::open(forged.as_bytes(), ORIGIN, &known),
            Err(CheckpointError::Note(NoteError::BadSignature { .. }))
        ));
    }
}

#[test]
fn every_flipped_bit_of_a_tlog_proof_fails() {
    let size = 37;
    let all = leaves(size);
    let tree = MemoryTree::from_leaf_hashes(&all);
    let log = signer(ORIGIN, 4);
    let cp = Checkpoint::new(ORIGIN, size, tree.root()).expect("checkpoint");
    let note = cp.sign(&log).expect("sign").to_text();
    let index = 21;
    let inclusion = inclusion_proof(&tree, index, size).expect("proof");
    let proof = TlogProof::new(None, index, inclusion, &note).expect("tlog proof");
    let known = Verifiers::new(vec![log.verifier()]).expect("verifiers");
    let text = proof.to_text();
    let leaf = &all[index as usize];
    assert!(proof.verify(leaf, ORIGIN, &known).is_ok());
    for i in 0..text.len() {
        for bit in 0..8 {
            let mut bytes = text.clone().into_bytes();
            bytes[i] ^= 1 << bit;
            let Ok(tampered) = String::from_utf8(bytes) else {
                continue;
            };
            let verified = TlogProof::parse(&tampered).and_then(|p| p.verify(leaf, ORIGIN, &known));
            assert!(verified.is_err(), "byte {i} bit {bit} still verifies");
        }
    }
}

//! Notes and checkpoints against Cloudflare's `signed_note` and `tlog_tiles` (azul), which we
//! did not write: what we sign they verify, what they sign we verify, key strings are read the
//! same way, and checkpoints round-trip between the two.

use cra_tlog::note::key_id;
use cra_tlog::{Checkpoint, Ed25519Verifier, Note, Verifiers, leaf_hash};
use signed_note::{Note as AzulNote, StandardSigner, StandardVerifier, VerifierList};

use crate::support::signer;

fn azul_verifiers(vkeys: &[String]) -> VerifierList {
    let list = vkeys
        .iter()
        .map(|k| -> Box<dyn signed_note::Verifier> {
            Box::new(StandardVerifier::new(k).unwrap_or_else(|e| panic!("{k}: {e}")))
        })
        .collect();
    VerifierList::new(list)
}

fn checkpoint_note(origin: &str, size: u64, extensions: Vec<String>) -> (Checkpoint, String) {
    let cp = Checkpoint::with_extensions(origin, size, leaf_hash(&size.to_be_bytes()), extensions)
        .unwrap_or_else(|e| panic!("{e}"));
    let note = cp
        .sign(&signer(origin, 7))
        .unwrap_or_else(|e| panic!("{e}"));
    (cp, note.to_text())
}

#[test]
fn azul_verifies_what_we_sign() {
    let (_, text) = checkpoint_note("log.example/cra", 12_345, vec![]);
    let ours = signer("log.example/cra", 7).verifier().to_key_string();
    let note = AzulNote::from_bytes(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let (verified, unverified) = note
        .verify(&azul_verifiers(&[ours]))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((verified.len(), unverified.len()), (1, 0));
    assert_eq!(note.to_bytes(), text.as_bytes());
}

#[test]
fn azul_verifies_each_key_of_a_rotated_note() {
    let (old, new) = (signer("log.example/cra", 1), signer("log.example/cra", 2));
    let mut note = Note::new("log.example/cra\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n")
        .unwrap_or_else(|e| panic!("{e}"));
    note.sign(&old).unwrap_or_else(|e| panic!("{e}"));
    note.sign(&new).unwrap_or_else(|e| panic!("{e}"));
    let azul = AzulNote::from_bytes(note.to_text().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    for key in [&old, &new] {
        let list = azul_verifiers(&[key.verifier().to_key_string()]);
        let (verified, unverified) = azul.verify(&list).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((verified.len(), unverified.len()), (1, 1));
    }
}

#[test]
fn we_verify_what_azul_signs_and_the_bytes_are_ours() {
    let ours = signer("log.example/cra", 9);
    let theirs = StandardSigner::new(&ours.to_key_string()).unwrap_or_else(|e| panic!("{e}"));
    let (cp, _) = checkpoint_note("log.example/cra", 77, vec!["ext a".into(), "ext b".into()]);
    let mut azul = AzulNote::new(cp.to_text().as_bytes(), &[]).unwrap_or_else(|e| panic!("{e}"));
    azul.add_sigs(&[&theirs]).unwrap_or_else(|e| panic!("{e}"));
    let their_bytes = azul.to_bytes();
    let known = Verifiers::new(vec![ours.verifier()]).unwrap_or_else(|e| panic!("{e}"));
    let (opened, _) =
        Checkpoint::open(&their_bytes, "log.example/cra", &known).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(opened, cp);
    // Ed25519 is deterministic: with the same key, azul and we write the same note, byte for byte.
    let mut ours_note = Note::new(&cp.to_text()).unwrap_or_else(|e| panic!("{e}"));
    ours_note.sign(&ours).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ours_note.to_text().as_bytes(), their_bytes.as_slice());
}

#[test]
fn key_strings_and_ids_agree_with_azul() {
    let ours = signer("witness.example/w1", 3);
    let vkey = ours.verifier().to_key_string();
    let theirs = StandardVerifier::new(&vkey).unwrap_or_else(|e| panic!("{e}"));
    use signed_note::Verifier as _;
    assert_eq!(
        (theirs.name(), theirs.key_id()),
        (ours.name(), ours.key_id())
    );
    let public = Ed25519Verifier::parse(&vkey).map(|v| v.to_key_string());
    assert_eq!(public, Ok(vkey.clone()));
    let material = {
        use base64::Engine as _;
        let b64 = vkey.rsplit('+').next().unwrap_or_default();
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap_or_default()
    };
    assert_eq!(signed_note::key_id(ours.name(), &material), ours.key_id());
    assert_eq!(
        key_id(ours.name(), material[0], &material[1..]),
        ours.key_id()
    );
    assert!(StandardSigner::new(&ours.to_key_string()).is_ok());
}

#[test]
fn checkpoints_round_trip_through_azul() {
    let cases: [(&str, u64, Vec<String>); 4] = [
        ("log.example/cra", 0, vec![]),
        ("log.example/cra", 1, vec![]),
        ("example.com/behind-the-sofa", u64::MAX, vec!["one".into()]),
        ("o", 20_852_163, vec!["a".into(), "b c".into()]),
    ];
    for (origin, size, extensions) in cases {
        let root = leaf_hash(origin.as_bytes());
        let ours = Checkpoint::with_extensions(origin, size, root, extensions.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        let ext: String = extensions.iter().map(|e| format!("{e}\n")).collect();
        let theirs = tlog_tiles::Checkpoint::new(origin, size, tlog_tiles::Hash(root), &ext)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ours.to_text().as_bytes(), theirs.to_bytes().as_slice());
        let parsed = tlog_tiles::Checkpoint::from_bytes(ours.to_text().as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (parsed.origin(), parsed.size(), parsed.hash().0),
            (origin, size, root)
        );
        let back = std::str::from_utf8(&theirs.to_bytes()).map(|t| Checkpoint::parse(t).ok());
        assert_eq!(back, Ok(Some(ours)));
    }
}

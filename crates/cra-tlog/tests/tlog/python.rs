//! Independent verification: `tools/tlog_verify.py`, our second reading of RFC 9162, RFC 8032
//! and the C2SP signed-note, tlog-checkpoint and tlog-proof texts (standard-library Python with
//! its own Ed25519), accepts what cra-tlog makes and rejects tampered versions of it.
//!
//! Every check of a test goes through one `python3 tools/tlog_verify.py batch` process: a JSON
//! request a line in, a JSON answer a line out.

use std::io::Write as _;
use std::process::{Command, Stdio};

use cra_tlog::hash::to_hex;
use cra_tlog::{
    Checkpoint, Hash, MemoryTree, TlogProof, consistency_proof, inclusion_proof, root, root_of,
};
use rand::Rng as _;
use serde_json::{Value, json};

use crate::support::{event_hash, leaves, seeded_rng, signer};
use crate::vectors;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/tlog_verify.py");
const ORIGIN: &str = "log.example/cra";

/// What a check expects of the tool: its exit code and, when valid, fields of its result.
struct Check {
    label: String,
    argv: Vec<String>,
    stdin: String,
    code: i64,
    result: Option<Value>,
}

/// Checks collected, then run in one Python process.
#[derive(Default)]
struct Batch {
    checks: Vec<Check>,
}

impl Batch {
    fn push(
        &mut self,
        label: String,
        argv: &[&str],
        stdin: &str,
        code: i64,
        result: Option<Value>,
    ) {
        self.checks.push(Check {
            label,
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            stdin: stdin.to_owned(),
            code,
            result,
        });
    }

    fn valid(&mut self, label: String, argv: &[&str], stdin: &str) {
        self.push(label, argv, stdin, 0, None);
    }

    fn invalid(&mut self, label: String, argv: &[&str], stdin: &str) {
        self.push(label, argv, stdin, 2, None);
    }

    /// Runs every check; panics listing the ones whose answer differs.
    fn run(self) {
        let mut input = String::new();
        for check in &self.checks {
            let request = json!({"argv": check.argv, "stdin": check.stdin});
            input.push_str(&request.to_string());
            input.push('\n');
        }
        let mut child = match Command::new("python3")
            .args([SCRIPT, "batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => panic!(
                "could not run python3 ({e}): the independent verifier tools/tlog_verify.py \
                 needs python3 (3.8 or later) on PATH"
            ),
        };
        let mut stdin = child.stdin.take().expect("stdin");
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().expect("python3 output");
        writer.join().expect("writer").expect("write requests");
        assert!(
            out.status.success(),
            "tlog_verify.py batch failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("answer {l:?}: {e}")))
            .collect();
        assert_eq!(answers.len(), self.checks.len(), "one answer a request");
        let mut wrong = Vec::new();
        for (check, answer) in self.checks.iter().zip(&answers) {
            let code_ok = answer["code"].as_i64() == Some(check.code);
            let result_ok = check.result.as_ref().is_none_or(|want| {
                want.as_object()
                    .into_iter()
                    .flatten()
                    .all(|(k, v)| answer["result"][k] == *v)
            });
            if !(code_ok && result_ok) {
                wrong.push(format!(
                    "{}: expected code {} {:?}, got {answer}",
                    check.label, check.code, check.result
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {} checks differ, first ones:\n{}",
            wrong.len(),
            self.checks.len(),
            wrong[..wrong.len().min(20)].join("\n")
        );
    }
}

fn hex_list(proof: &[Hash]) -> String {
    proof.iter().map(to_hex).collect::<Vec<_>>().join(",")
}

fn flip(hash: &Hash, byte: usize) -> Hash {
    let mut out = *hash;
    out[byte % 32] ^= 0x01;
    out
}

fn inclusion_argv(leaf: &Hash, index: u64, size: u64, root: &Hash, proof: &[Hash]) -> Vec<String> {
    vec![
        "inclusion".into(),
        "--leaf".into(),
        to_hex(leaf),
        "--index".into(),
        index.to_string(),
        "--size".into(),
        size.to_string(),
        "--root".into(),
        to_hex(root),
        "--proof".into(),
        hex_list(proof),
    ]
}

fn consistency_argv(old: u64, new: u64, r1: &Hash, r2: &Hash, proof: &[Hash]) -> Vec<String> {
    vec![
        "consistency".into(),
        "--old-size".into(),
        old.to_string(),
        "--new-size".into(),
        new.to_string(),
        "--old-root".into(),
        to_hex(r1),
        "--new-root".into(),
        to_hex(r2),
        "--proof".into(),
        hex_list(proof),
    ]
}

fn strs(argv: &[String]) -> Vec<&str> {
    argv.iter().map(String::as_str).collect()
}

/// Leaf data lines for `root`: the event hashes of `n` events.
fn leaf_lines(n: u64) -> String {
    (0..n).map(|i| hex::encode(event_hash(i)) + "\n").collect()
}

/// Adds the inclusion checks of leaf `index` in the tree of `size`: the true proof, and a flipped
/// byte in each proof hash, in the root and in the leaf.
fn inclusion_checks(batch: &mut Batch, tree: &MemoryTree, all: &[Hash], index: u64, size: u64) {
    let r = root(tree, size).expect("root");
    let proof = inclusion_proof(tree, index, size).expect("proof");
    let leaf = &all[usize::try_from(index).expect("index")];
    let label = format!("inclusion {index}/{size}");
    batch.valid(
        label.clone(),
        &strs(&inclusion_argv(leaf, index, size, &r, &proof)),
        "",
    );
    for h in 0..proof.len() {
        let mut tampered = proof.clone();
        tampered[h] = flip(&proof[h], h + usize::try_from(size).expect("size"));
        let argv = inclusion_argv(leaf, index, size, &r, &tampered);
        batch.invalid(format!("{label} proof hash {h} flipped"), &strs(&argv), "");
    }
    let argv = inclusion_argv(leaf, index, size, &flip(&r, 7), &proof);
    batch.invalid(format!("{label} root flipped"), &strs(&argv), "");
    let argv = inclusion_argv(&flip(leaf, 3), index, size, &r, &proof);
    batch.invalid(format!("{label} leaf flipped"), &strs(&argv), "");
}

/// Adds the consistency checks from `old` to `new`: the true proof, and flips as above.
fn consistency_checks(batch: &mut Batch, tree: &MemoryTree, old: u64, new: u64) {
    let (r1, r2) = (root(tree, old).expect("old"), root(tree, new).expect("new"));
    let proof = consistency_proof(tree, old, new).expect("proof");
    let label = format!("consistency {old}->{new}");
    batch.valid(
        label.clone(),
        &strs(&consistency_argv(old, new, &r1, &r2, &proof)),
        "",
    );
    for h in 0..proof.len() {
        let mut tampered = proof.clone();
        tampered[h] = flip(&proof[h], h + usize::try_from(new).expect("size"));
        let argv = consistency_argv(old, new, &r1, &r2, &tampered);
        batch.invalid(format!("{label} proof hash {h} flipped"), &strs(&argv), "");
    }
    let argv = consistency_argv(old, new, &flip(&r1, 5), &r2, &proof);
    batch.invalid(format!("{label} old root flipped"), &strs(&argv), "");
    // (every tree extends the empty one: from size 0 the new root is not bound)
    if old > 0 {
        let argv = consistency_argv(old, new, &r1, &flip(&r2, 9), &proof);
        batch.invalid(format!("{label} new root flipped"), &strs(&argv), "");
    }
}

#[test]
fn python_agrees_on_roots_and_proofs_of_every_small_tree() {
    let all = leaves(40);
    let tree = MemoryTree::from_leaf_hashes(&all);
    let mut batch = Batch::default();
    for size in 0..=40u64 {
        let want = json!({"root": to_hex(&root(&tree, size).expect("root")), "size": size});
        batch.push(
            format!("root {size}"),
            &["root", "--json"],
            &leaf_lines(size),
            0,
            Some(want),
        );
    }
    for size in 1..=40u64 {
        for index in 0..size {
            inclusion_checks(&mut batch, &tree, &all, index, size);
        }
        for old in 0..=size {
            consistency_checks(&mut batch, &tree, old, size);
        }
    }
    batch.run();
}

#[test]
fn python_agrees_on_random_large_trees() {
    let mut rng = seeded_rng("python_agrees_on_random_large_trees");
    let mut batch = Batch::default();
    for _ in 0..3 {
        let size = rng.random_range(1_000..=20_000u64);
        let all = leaves(size);
        let tree = MemoryTree::from_leaf_hashes(&all);
        let want = json!({"root": to_hex(&root_of(&all)), "size": size});
        batch.push(
            format!("root {size}"),
            &["root", "--json"],
            &leaf_lines(size),
            0,
            Some(want),
        );
        for _ in 0..20 {
            let index = rng.random_range(0..size);
            inclusion_checks(&mut batch, &tree, &all, index, size);
            let old = rng.random_range(1..=size);
            consistency_checks(&mut batch, &tree, old, size);
        }
    }
    batch.run();
}

#[test]
fn python_agrees_on_the_rfc6962_vectors() {
    let v = vectors::load();
    let mut batch = Batch::default();
    for (size, r) in &v.roots {
        let lines: String = v.leaves[..usize::try_from(*size).expect("size")]
            .iter()
            .map(|l| {
                if l.is_empty() {
                    "-\n".to_owned()
                } else {
                    hex::encode(l) + "\n"
                }
            })
            .collect();
        let want = json!({"root": to_hex(r)});
        batch.push(
            format!("root {size}"),
            &["root", "--json"],
            &lines,
            0,
            Some(want),
        );
    }
    let root_of_size = |size: u64| v.roots.iter().find(|(s, _)| *s == size).expect("root").1;
    for (index, size, proof) in &v.inclusions {
        let leaf = cra_tlog::leaf_hash(&v.leaves[usize::try_from(*index).expect("index")]);
        let argv = inclusion_argv(&leaf, *index, *size, &root_of_size(*size), proof);
        batch.valid(format!("inclusion {index}/{size}"), &strs(&argv), "");
    }
    for (old, new, proof) in &v.consistencies {
        let argv = consistency_argv(*old, *new, &root_of_size(*old), &root_of_size(*new), proof);
        batch.valid(format!("consistency {old}->{new}"), &strs(&argv), "");
    }
    batch.run();
}

/// The note with its signature line's base64 decoded, changed by `change`, and encoded again.
fn tamper_signature(note: &str, change: impl Fn(&mut Vec<u8>)) -> String {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    let (text, line) = note.rsplit_once("\n\n").expect("a signed note");
    let line = line.strip_suffix('\n').expect("final newline");
    let (name, encoded) = line.rsplit_once(' ').expect("signature line");
    let mut raw = STANDARD.decode(encoded).expect("base64");
    change(&mut raw);
    format!("{text}\n\n{name} {}\n", STANDARD.encode(raw))
}

#[test]
fn python_verifies_signed_checkpoints_and_tlog_proofs() {
    let log = signer(ORIGIN, 7);
    let vkey = log.verifier().to_key_string();
    let impostor = signer(ORIGIN, 8);
    let witness = signer("witness.example/w1", 9);
    let wkey = witness.verifier().to_key_string();
    let all = leaves(40);
    let tree = MemoryTree::from_leaf_hashes(&all);
    let mut batch = Batch::default();
    let checkpoint_argv = ["checkpoint", "--origin", ORIGIN, "--key", &vkey, "-"];
    for size in 0..=40u64 {
        let r = root(&tree, size).expect("root");
        let checkpoint = Checkpoint::new(ORIGIN, size, r).expect("checkpoint");
        let note = checkpoint.sign(&log).expect("sign").to_text();
        let label = format!("checkpoint {size}");
        let want = json!({"size": size, "root": to_hex(&r)});
        batch.push(label.clone(), &checkpoint_argv, &note, 0, Some(want));
        let note_argv = ["note", "--key", &wkey, "--key", &vkey, "-"];
        batch.valid(format!("{label} as a note"), &note_argv, &note);
        // A witness cosignature rides along; the log's own key must still be the one.
        let mut cosigned = checkpoint.sign(&log).expect("sign");
        cosigned.sign(&witness).expect("cosign");
        let cosigned = cosigned.to_text();
        let both = [
            "checkpoint",
            "--origin",
            ORIGIN,
            "--key",
            &vkey,
            "--key",
            &wkey,
            "-",
        ];
        batch.valid(format!("{label} cosigned"), &both, &cosigned);
        let witness_only = ["checkpoint", "--origin", ORIGIN, "--key", &wkey, "-"];
        batch.invalid(
            format!("{label} witness key only"),
            &witness_only,
            &cosigned,
        );
        // Tampering.
        let b64 = cra_tlog::hash::to_base64(&r);
        let flipped_root = note.replacen(&b64, &cra_tlog::hash::to_base64(&flip(&r, 11)), 1);
        batch.invalid(
            format!("{label} root flipped"),
            &checkpoint_argv,
            &flipped_root,
        );
        let size_line = format!("\n{size}\n");
        let other_size = note.replacen(&size_line, &format!("\n{}\n", size + 1), 1);
        batch.invalid(
            format!("{label} size changed"),
            &checkpoint_argv,
            &other_size,
        );
        let sig_flipped = tamper_signature(&note, |raw| raw[4 + (size as usize % 64)] ^= 0x20);
        batch.invalid(
            format!("{label} signature flipped"),
            &checkpoint_argv,
            &sig_flipped,
        );
        let id_flipped = tamper_signature(&note, |raw| raw[0] ^= 0x01);
        batch.invalid(
            format!("{label} key ID flipped"),
            &checkpoint_argv,
            &id_flipped,
        );
        let by_impostor = checkpoint.sign(&impostor).expect("sign").to_text();
        batch.invalid(format!("{label} other key"), &checkpoint_argv, &by_impostor);
        let wrong_origin = [
            "checkpoint",
            "--origin",
            "log.example/other",
            "--key",
            &vkey,
            "-",
        ];
        batch.invalid(format!("{label} other origin"), &wrong_origin, &note);

        // Every leaf's tlog-proof against this checkpoint.
        for index in 0..size {
            let proof = inclusion_proof(&tree, index, size).expect("proof");
            let extra = (index % 3 == 0).then(|| vec![0xc5, u8::try_from(index).expect("small")]);
            let text = TlogProof::new(extra, index, proof.clone(), &note)
                .expect("tlog proof")
                .to_text();
            let leaf = to_hex(&all[usize::try_from(index).expect("index")]);
            let argv = [
                "proof", "--leaf", &leaf, "--origin", ORIGIN, "--key", &vkey, "-",
            ];
            let label = format!("tlog-proof {index}/{size}");
            batch.valid(label.clone(), &argv, &text);
            if let Some(first) = proof.first() {
                let b64 = cra_tlog::hash::to_base64(first);
                let bad = cra_tlog::hash::to_base64(&flip(first, index as usize));
                let tampered = text.replacen(&format!("\n{b64}\n"), &format!("\n{bad}\n"), 1);
                batch.invalid(format!("{label} proof hash flipped"), &argv, &tampered);
            }
            let other = to_hex(&flip(&all[usize::try_from(index).expect("index")], 0));
            let other_leaf = [
                "proof", "--leaf", &other, "--origin", ORIGIN, "--key", &vkey, "-",
            ];
            batch.invalid(format!("{label} other leaf"), &other_leaf, &text);
            let impostor_key = impostor.verifier().to_key_string();
            let wrong_key = [
                "proof",
                "--leaf",
                &leaf,
                "--origin",
                ORIGIN,
                "--key",
                &impostor_key,
                "-",
            ];
            batch.invalid(format!("{label} other key"), &wrong_key, &text);
        }
    }
    batch.run();
}

#[test]
fn python_verifies_the_c2sp_signed_note_example() {
    // The example of c2sp.org/signed-note ("Verifier keys", "Example").
    let vkey = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k";
    let note = "This is an example message.\n\n\u{2014} example.com/foo \
                Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n";
    let mut batch = Batch::default();
    batch.valid("spec example".into(), &["note", "--key", vkey, "-"], note);
    let altered = note.replacen("example message", "example massage", 1);
    batch.invalid(
        "spec example altered".into(),
        &["note", "--key", vkey, "-"],
        &altered,
    );
    batch.run();
}

/// One RFC 8032 §7.1 vector: (name, seed, public key, message, signature).
type Vector = (String, [u8; 32], Vec<u8>, Vec<u8>, Vec<u8>);

fn rfc8032_vectors() -> Vec<Vector> {
    let text = include_str!("../fixtures/rfc8032_ed25519_vectors.txt");
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let [name, seed, public, message, signature] = words.as_slice() else {
                panic!("bad vector line {line}")
            };
            let bytes = |h: &str| hex::decode(h).unwrap_or_else(|e| panic!("{h}: {e}"));
            let message = if *message == "-" {
                Vec::new()
            } else {
                bytes(message)
            };
            let seed: [u8; 32] = bytes(seed).try_into().expect("32-byte seed");
            (
                (*name).to_owned(),
                seed,
                bytes(public),
                message,
                bytes(signature),
            )
        })
        .collect()
}

#[test]
fn python_ed25519_passes_the_rfc8032_vectors() {
    let vectors = rfc8032_vectors();
    assert!(vectors.len() >= 3, "TEST 1 to 3 at least");
    let mut batch = Batch::default();
    for (name, seed, public, message, signature) in &vectors {
        // The fixture is transcribed right: our signer makes the same key and signature.
        let ours = cra_tlog::Ed25519Signer::from_seed("rfc8032", seed).expect("signer");
        let sig = ours.sign(message);
        assert_eq!(sig.signature(), signature.as_slice(), "{name}: signature");
        let check = |batch: &mut Batch, label: String, p: &[u8], m: &[u8], s: &[u8], code| {
            let (p, m, s) = (hex::encode(p), hex::encode(m), hex::encode(s));
            let argv = [
                "ed25519",
                "--public-key",
                &p,
                "--message",
                &m,
                "--signature",
                &s,
            ];
            batch.push(label, &argv, "", code, None);
        };
        check(&mut batch, name.clone(), public, message, signature, 0);
        // One bit flipped: every bit of R and S at a stride, and of the key and the message.
        for bit in (0..512).step_by(5) {
            let mut s = signature.clone();
            s[bit / 8] ^= 1 << (bit % 8);
            check(
                &mut batch,
                format!("{name} signature bit {bit}"),
                public,
                message,
                &s,
                2,
            );
        }
        for bit in (0..256).step_by(17) {
            let mut p = public.clone();
            p[bit / 8] ^= 1 << (bit % 8);
            check(
                &mut batch,
                format!("{name} key bit {bit}"),
                &p,
                message,
                signature,
                2,
            );
        }
        let mut longer = message.clone();
        longer.push(0);
        check(
            &mut batch,
            format!("{name} message longer"),
            public,
            &longer,
            signature,
            2,
        );
        if let Some(first) = message.first() {
            let mut m = message.clone();
            m[0] = first ^ 0x80;
            check(
                &mut batch,
                format!("{name} message bit flipped"),
                public,
                &m,
                signature,
                2,
            );
        }
    }
    batch.run();
}

#[test]
fn python_verifies_witness_cosignatures() {
    use cra_tlog::witness::AddCheckpoint;
    use cra_tlog::{CosignatureSigner, Witness};

    let log = signer(ORIGIN, 7);
    let cosigner = CosignatureSigner::from_seed("witness.example/w1", &[42; 32]).expect("key");
    let vkey = cosigner.verifier().to_key_string();
    let other = CosignatureSigner::from_seed("witness.example/w1", &[43; 32])
        .expect("key")
        .verifier()
        .to_key_string();
    let witness = Witness::new(cosigner, vec![log.verifier()]).expect("witness");
    let tree = MemoryTree::from_leaf_hashes(&leaves(50));
    let mut batch = Batch::default();
    for (size, timestamp) in [
        (0, 1),
        (1, 1_700_000_000),
        (17, 1_750_000_123),
        (50, i64::MAX as u64),
    ] {
        let note = Checkpoint::new(ORIGIN, size, root(&tree, size).expect("root"))
            .expect("checkpoint")
            .sign(&log)
            .expect("signed");
        let request = AddCheckpoint {
            old_size: 0,
            proof: vec![],
            checkpoint: note.to_text().into_bytes(),
        };
        let submission = witness.open(&request.to_body()).expect("open");
        let accepted = witness
            .decide(&submission, None, timestamp)
            .expect("cosigned");
        let text = accepted.cosigned.to_text();
        let label = format!("cosigned size {size} at {timestamp}");
        let argv = ["cosignature", "--key", vkey.as_str(), "-"];
        batch.push(
            label.clone(),
            &argv,
            &text,
            0,
            Some(json!({"valid": true, "timestamp": timestamp})),
        );
        batch.invalid(
            format!("{label}, another cosigner key"),
            &["cosignature", "--key", other.as_str(), "-"],
            &text,
        );
        batch.invalid(
            format!("{label}, only the log's signature"),
            &argv,
            &note.to_text(),
        );
        let body_changed = text.replacen(&format!("\n{size}\n"), &format!("\n{}\n", size + 1), 1);
        batch.invalid(format!("{label}, size changed"), &argv, &body_changed);
        // the cosignature is the last line: change its timestamp, then each byte of it
        let later = tamper_signature(&text, |raw| raw[11] ^= 0x02);
        batch.invalid(format!("{label}, timestamp changed"), &argv, &later);
        for at in [4, 12, 40, 75] {
            let flipped = tamper_signature(&text, |raw| raw[at] ^= 0x01);
            batch.invalid(format!("{label}, byte {at} flipped"), &argv, &flipped);
        }
    }
    batch.run();
}

//! `cra serve` with `[[log.witnesses]]` against a real `cra witness` on loopback: a checkpoint is
//! published only with the required cosignatures; with the witness down nothing new is
//! published (503), unless none are required; a witness that missed a checkpoint is brought up
//! to date through its 409 answer, while one that cosigned a larger tree under the origin is
//! refused; a witness that never answers times out (`log.witness_timeout_ms`) and counts as not
//! cosigning; and a receipt's checkpoint carries the cosignature that `cra log verify-receipt
//! --witness-key` checks.

use std::path::Path;
use std::sync::Arc;

use cra_cli::OutputFormat;
use cra_cli::cmd::log_receipt::{VerifyReceiptArgs, verify_receipt};
use cra_cli::cmd::witness::WitnessService;
use cra_runtime::config::WitnessConfig;
use cra_tlog::witness::origin_hash;
use cra_tlog::{Checkpoint, CosignatureSigner, Ed25519Signer, Ed25519Verifier, Note, Witness};

use super::live::{AGENT, Live, OPERATOR, atlas_dir};
use crate::witness::Server;

const ORIGIN: &str = "witnessed.example/log";

fn cosigner() -> CosignatureSigner {
    CosignatureSigner::from_seed("witness.example/w1", &[42; 32]).unwrap()
}

/// The witness of the log whose verifier is `log`, keeping its state in `dir`.
fn witness(dir: &Path, log: &Ed25519Verifier) -> Server {
    let witness = Witness::new(cosigner(), vec![log.clone()]).unwrap();
    let service = WitnessService::open(witness, dir, Arc::new(|| 1_780_000_000)).unwrap();
    Server::start(service)
}

/// A new log key for `ORIGIN`, written to `dir/log.key`: the file and the signer.
fn log_key(dir: &Path) -> (std::path::PathBuf, Ed25519Signer) {
    let key_file = dir.join("log.key");
    let key = cra_runtime::tlog::generate_key(ORIGIN).unwrap();
    cra_runtime::tlog::write_key_file(&key_file, &key).unwrap();
    (key_file, Ed25519Signer::parse(&key).unwrap())
}

fn witness_config(url: &str) -> Vec<WitnessConfig> {
    vec![WitnessConfig {
        url: url.to_owned(),
        key: cosigner().verifier().to_key_string(),
    }]
}

/// Opens a session, so the tree grows.
fn grow(live: &mut Live) {
    live.open_session("witnessed");
}

/// `POST /v1/log/checkpoint` as the operator: the status and the body's text.
fn cut(live: &Live) -> (u16, String) {
    let (st, body) = live.call("POST", OPERATOR, "/v1/log/checkpoint", None);
    let text = body
        .as_str()
        .map_or_else(|| body.to_string(), str::to_owned);
    (st, text)
}

/// The checkpoint's size, after checking the log's signature; and whether the witness cosigned.
fn opened(note: &str, log: &Ed25519Verifier) -> (u64, bool) {
    let verifiers = cra_tlog::Verifiers::new(vec![log.clone()]).unwrap();
    let (checkpoint, note) = Checkpoint::open(note.as_bytes(), ORIGIN, &verifiers).unwrap();
    let cosigned = cosigner().verifier().verify_note(&note).is_ok();
    (checkpoint.size(), cosigned)
}

/// The size of the latest checkpoint the witness cosigned (its monitoring endpoint).
fn witnessed_size(witness: &Server) -> u64 {
    let url = format!("{}/{}/checkpoint", witness.url, origin_hash(ORIGIN));
    let text = crate::http_get(url).unwrap().text().unwrap();
    let note = Note::parse(text.as_bytes()).unwrap();
    Checkpoint::parse(note.text()).unwrap().size()
}

#[test]
fn checkpoints_are_published_only_with_the_required_cosignatures() {
    let keys = tempfile::tempdir().unwrap();
    let (key_file, signer) = log_key(keys.path());
    let log = signer.verifier();
    let state = tempfile::tempdir().unwrap();
    let w1 = witness(state.path(), &log);
    let url = w1.url.clone();
    let mut live = Live::start_configured(None, vec![atlas_dir()], |c| {
        c.log.key_file = Some(key_file.clone());
        c.log.witnesses = witness_config(&url);
    });

    // 1. cosigned, then published
    grow(&mut live);
    let (st, note) = cut(&live);
    assert_eq!(st, 200, "{note}");
    let (s1, cosigned) = opened(&note, &log);
    assert!(cosigned, "{note}");
    assert_eq!(witnessed_size(&w1), s1);

    // 2. the witness is down: a grown tree's checkpoint is not published
    w1.stop();
    grow(&mut live);
    let (st, refused) = cut(&live);
    assert_eq!(st, 503, "{refused}");
    assert!(refused.contains("0 of the 1 required"), "{refused}");
    let (st, latest) = live.call("GET", AGENT, "/v1/log/checkpoint", None);
    assert_eq!((st, opened(latest.as_str().unwrap(), &log).0), (200, s1));

    // 3. none required: published without the cosignature
    live.restart(|c| c.log.witnesses_required = Some(0));
    grow(&mut live);
    let (st, note) = cut(&live);
    assert_eq!(st, 200, "{note}");
    let (s2, cosigned) = opened(&note, &log);
    assert!(s2 > s1 && !cosigned, "{note}");

    // 4. the witness is back (it last cosigned s1; this server does not know it and offers s2):
    //    its 409 names s1, and the request from s1 is cosigned
    let w1 = witness(state.path(), &log);
    let url = w1.url.clone();
    live.restart(|c| {
        c.log.witnesses_required = None;
        c.log.witnesses = witness_config(&url);
    });
    grow(&mut live);
    let (st, note) = cut(&live);
    assert_eq!(st, 200, "{note}");
    let (s3, cosigned) = opened(&note, &log);
    assert!(s3 > s2 && cosigned, "{note}");
    assert_eq!(witnessed_size(&w1), s3);

    // a receipt's checkpoint carries the cosignature
    let session = live.open_session("a receipt");
    let req = live.resolve_request("test.trace.ops", &session, "read the runbook", &["read"]);
    let (st, answer) = live.call("POST", AGENT, "/v1/resolve?receipt=true", Some(&req));
    assert_eq!(st, 200, "{answer}");
    let file = live.dir.path().join("receipt.json");
    std::fs::write(&file, answer.to_string()).unwrap();
    let check = verify_receipt(&VerifyReceiptArgs {
        receipt: file,
        log_key: log.to_key_string(),
        witness_keys: vec![cosigner().verifier().to_key_string()],
        witnesses: None,
        output: OutputFormat::Text,
    })
    .unwrap();
    assert_eq!(check.witnesses, vec!["witness.example/w1".to_owned()]);
    live.stop();
    w1.stop();
}

/// A witness that has cosigned a larger tree under this log's origin (another tree: a fork, or a
/// store restored from an old backup) cannot cosign this one: the cut is refused (503) naming
/// both sizes, and the witness keeps the larger checkpoint it had.
#[test]
fn a_witness_ahead_of_the_tree_is_refused_and_nothing_is_cosigned() {
    let keys = tempfile::tempdir().unwrap();
    let (key_file, signer) = log_key(keys.path());
    let log = signer.verifier();
    let state = tempfile::tempdir().unwrap();
    let w1 = witness(state.path(), &log);
    let ahead = Checkpoint::new(ORIGIN, 1_000_000, [7; 32])
        .unwrap()
        .sign(&signer)
        .unwrap();
    let first_sight = cra_runtime::tls::blocking_http_client()
        .build()
        .unwrap()
        .post(format!("{}/add-checkpoint", w1.url))
        .body(format!("old 0\n\n{}", ahead.to_text()))
        .send()
        .unwrap();
    assert_eq!(first_sight.status().as_u16(), 200);
    let url = w1.url.clone();
    let mut live = Live::start_configured(None, vec![atlas_dir()], |c| {
        c.log.key_file = Some(key_file.clone());
        c.log.witnesses = witness_config(&url);
    });
    grow(&mut live);
    let (st, refused) = cut(&live);
    assert_eq!(st, 503, "{refused}");
    assert!(
        refused.contains("cosigned a tree of 1000000 leaves, larger than this log's"),
        "{refused}"
    );
    assert_eq!(witnessed_size(&w1), 1_000_000);
    live.stop();
    w1.stop();
}

/// A witness that takes the connection and never answers counts as not cosigning once
/// `log.witness_timeout_ms` has passed: with both witnesses required the cut is refused (503)
/// naming it, and with one required the checkpoint is published with the other's cosignature.
#[test]
fn a_witness_that_never_answers_times_out_and_counts_as_not_cosigning() {
    let keys = tempfile::tempdir().unwrap();
    let (key_file, signer) = log_key(keys.path());
    let log = signer.verifier();
    let state = tempfile::tempdir().unwrap();
    let w1 = witness(state.path(), &log);
    // Connections complete in the listener's backlog and are never read.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_key = CosignatureSigner::from_seed("witness.example/silent", &[43; 32]).unwrap();
    let mut witnesses = witness_config(&w1.url);
    witnesses.push(WitnessConfig {
        url: format!("http://{}", silent.local_addr().unwrap()),
        key: silent_key.verifier().to_key_string(),
    });
    let mut live = Live::start_configured(None, vec![atlas_dir()], |c| {
        c.log.key_file = Some(key_file.clone());
        c.log.witnesses = witnesses;
        c.log.witness_timeout_ms = 300;
    });
    grow(&mut live);
    let (st, refused) = cut(&live);
    assert_eq!(st, 503, "{refused}");
    assert!(
        refused.contains("1 of the 2 required")
            && refused.contains("witness.example/silent")
            && refused.contains("no answer within `log.witness_timeout_ms`"),
        "{refused}"
    );

    live.restart(|c| c.log.witnesses_required = Some(1));
    grow(&mut live);
    let (st, note) = cut(&live);
    assert_eq!(st, 200, "{note}");
    let (size, cosigned) = opened(&note, &log);
    assert!(cosigned, "{note}");
    assert_eq!(witnessed_size(&w1), size);
    live.stop();
    w1.stop();
    drop(silent);
}

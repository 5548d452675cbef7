//! Receipts (`specs/tlog.md`, "Receipts"): a resolve and an execute asked with `?receipt=true`
//! answer a receipt of the event that recorded them, which `cra log verify-receipt` checks
//! offline with the log's key; a receipt is also asked later by event hash, only by a reader of
//! the chain; any changed member, proof line or key fails the check. On redb, and on
//! PostgreSQL when `CRA_TEST_POSTGRES_URL` is set, where a deployment without a log key answers
//! `receipt_error` beside the recorded answer.

use std::path::Path;

use cra_cli::OutputFormat;
use cra_cli::cmd::log_receipt::{ReceiptFailure, VerifyReceiptArgs, verify_receipt};
use serde_json::{Value, json};

use super::live::{AGENT, Live, OPERATOR};

/// A log key for the PostgreSQL run (the embedded store makes its own).
fn key_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("log.key");
    let key = cra_runtime::tlog::generate_key("receipts.example/log").unwrap();
    cra_runtime::tlog::write_key_file(&path, &key).unwrap();
    path
}

fn args(receipt: &Path, log_key: &str) -> VerifyReceiptArgs {
    VerifyReceiptArgs {
        receipt: receipt.to_owned(),
        log_key: log_key.to_owned(),
        witness_keys: Vec::new(),
        witnesses: None,
        output: OutputFormat::Json,
    }
}

/// Writes `receipt` to a file and checks it with `log_key`.
fn check(live: &Live, receipt: &Value, log_key: &str) -> Result<u64, ReceiptFailure> {
    let file = live.dir.path().join("receipt.json");
    std::fs::write(&file, receipt.to_string()).unwrap();
    verify_receipt(&args(&file, log_key)).map(|c| c.sequence)
}

fn invalid(live: &Live, receipt: &Value, log_key: &str) -> String {
    match check(live, receipt, log_key) {
        Err(ReceiptFailure::Invalid(why)) => why,
        other => panic!("expected an invalid receipt, got {other:?}"),
    }
}

/// The receipt checked by code we did not write in Rust: `tools/appendix_b.py` recomputes the
/// event's hash, `tools/tlog_verify.py proof` proves it in the checkpoint under `log_key`.
fn check_independently(live: &Live, receipt: &Value, log_key: &str) {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools");
    let run = |script: &str, args: &[&str], stdin: &str| {
        let mut child = std::process::Command::new("python3")
            .arg(tools.join(script))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the independent verifiers");
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{script} {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let event = &receipt["event"];
    let hash = run("appendix_b.py", &["hash"], &format!("{event}\n"));
    assert_eq!(hash.trim(), event["event_hash"].as_str().unwrap());
    let proof = live.dir.path().join("receipt.tlog-proof");
    std::fs::write(&proof, receipt["tlog_proof"].as_str().unwrap()).unwrap();
    let origin = log_key.split('+').next().unwrap();
    let proof = proof.to_str().unwrap();
    let leaf = event["event_hash"].as_str().unwrap();
    let found = run(
        "tlog_verify.py",
        &[
            "proof",
            "--leaf-data",
            leaf,
            "--origin",
            origin,
            "--key",
            log_key,
            "--json",
            proof,
        ],
        "",
    );
    let found: Value = serde_json::from_str(&found).unwrap();
    assert_eq!(found["index"], receipt["leaf_index"], "{found}");
}

fn receipts_hold_and_break(postgres: Option<(&str, &str)>) {
    let keys = tempfile::tempdir().unwrap();
    let key = postgres.map(|_| key_file(keys.path()));
    let mut live = Live::start_configured(postgres, vec![super::live::atlas_dir()], |c| {
        c.log.key_file = key.clone();
    });
    let (st, log_key) = live.call("GET", AGENT, "/v1/log/key", None);
    assert_eq!(st, 200, "{log_key}");
    let log_key = log_key.as_str().unwrap().trim().to_owned();
    let session = live.open_session("receipts");

    // a resolve's receipt binds its carp.resolution.completed event, whose resolution is the
    // answer
    let req = live.resolve_request("test.trace.ops", &session, "read the runbook", &["read"]);
    let (st, mut answer) = live.call("POST", AGENT, "/v1/resolve?receipt=true", Some(&req));
    assert_eq!(st, 200, "{answer}");
    let receipt = answer
        .as_object_mut()
        .unwrap()
        .remove("receipt")
        .unwrap_or_else(|| panic!("no receipt: {answer}"));
    assert_eq!(receipt["event"]["event_type"], "carp.resolution.completed");
    assert_eq!(receipt["event"]["session_id"], session.as_str());
    assert_eq!(receipt["event"]["payload"]["resolution"], answer);
    let sequence = check(&live, &receipt, &log_key).unwrap();
    assert_eq!(json!(sequence), receipt["event"]["sequence"]);
    check_independently(&live, &receipt, &log_key);

    // an execute's receipt binds its outcome
    let now = live.tick();
    let exec = json!({
        "carp_version": "1.0", "request_id": live.uuid(), "timestamp": now,
        "operation": "execute",
        "requester": {"agent_id": "ops-bot", "session_id": session},
        "execution": {"resolution_id": answer["resolution_id"], "action_id": "doc.read",
                      "parameters": {"page": "intro"}},
    });
    let (st, executed) = live.call("POST", AGENT, "/v1/execute?receipt=true", Some(&exec));
    assert_eq!(st, 200, "{executed}");
    assert_eq!(executed["status"], "success", "{executed}");
    let exec_receipt = &executed["receipt"];
    assert_eq!(exec_receipt["event"]["event_type"], "action.executed");
    assert!(check(&live, exec_receipt, &log_key).unwrap() > sequence);

    // asked again later by event hash: by the chain's agent, not by an agent of another chain
    let hash = receipt["event"]["event_hash"].as_str().unwrap();
    let path = format!("/v1/log/receipt?event_hash={hash}");
    let (st, again) = live.call("GET", AGENT, &path, None);
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["event"], receipt["event"]);
    assert_eq!(check(&live, &again, &log_key).unwrap(), sequence);
    let (st, refused) = live.call("GET", super::live::OTHER_AGENT, &path, None);
    assert_eq!(st, 403, "{refused}");
    let (st, operator) = live.call("GET", OPERATOR, &path, None);
    assert_eq!(st, 200, "{operator}");
    let (st, bad) = live.call("POST", AGENT, "/v1/resolve?receipt=yes", Some(&req));
    assert_eq!(
        (st, bad["error"].as_str()),
        (400, Some("invalid_request")),
        "{bad}"
    );

    // every member is bound: a changed payload, decision hash, index, proof line or key fails
    let mut changed = receipt.clone();
    changed["event"]["payload"]["decision_type"] = json!("deny");
    assert!(invalid(&live, &changed, &log_key).contains("hashes to"));
    let mut changed = receipt.clone();
    changed["decision_hash"] = json!(format!("sha256:{}", "0".repeat(64)));
    assert!(invalid(&live, &changed, &log_key).contains("decision_hash"));
    let mut changed = receipt.clone();
    changed["leaf_index"] = json!(receipt["leaf_index"].as_u64().unwrap() + 1);
    assert!(invalid(&live, &changed, &log_key).contains("leaf_index"));
    let proof = receipt["tlog_proof"].as_str().unwrap();
    let mut lines: Vec<String> = proof.split('\n').map(str::to_owned).collect();
    // the first inclusion hash (after the header and the index) with its first character changed
    let at = lines.iter().position(|l| l.starts_with("index ")).unwrap() + 1;
    assert!(
        !lines[at].is_empty(),
        "the tree holds more than one leaf: {proof}"
    );
    let first = if lines[at].starts_with('A') { "B" } else { "A" };
    lines[at].replace_range(0..1, first);
    let mut changed = receipt.clone();
    changed["tlog_proof"] = json!(lines.join("\n"));
    assert!(invalid(&live, &changed, &log_key).contains("not proved"));
    let other = cra_tlog::Ed25519Signer::from_seed(
        cra_tlog::Ed25519Verifier::parse(&log_key).unwrap().name(),
        &[9; 32],
    )
    .unwrap()
    .verifier()
    .to_key_string();
    assert!(invalid(&live, &receipt, &other).contains("not proved"));
    let witness = cra_tlog::CosignatureSigner::from_seed("witness.example/w9", &[3; 32])
        .unwrap()
        .verifier()
        .to_key_string();
    let file = live.dir.path().join("receipt.json");
    std::fs::write(&file, receipt.to_string()).unwrap();
    let mut with_witness = args(&file, &log_key);
    with_witness.witness_keys = vec![witness];
    assert!(matches!(
        verify_receipt(&with_witness),
        Err(ReceiptFailure::Invalid(why)) if why.contains("0 of the 1 witness cosignatures")
    ));
    live.stop();
}

#[test]
fn receipts_verify_offline_and_any_change_fails_them() {
    receipts_hold_and_break(None);
}

#[test]
fn receipts_verify_offline_on_postgres() {
    let Some(url) = cra_store::testing::postgres_url("receipts_verify_offline_on_postgres") else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "cli_receipts");
    receipts_hold_and_break(Some((&url, schema.name())));
}

/// A PostgreSQL deployment with no `log.key_file` signs nothing: the key and a cut answer 503,
/// and a resolve asked for a receipt is still answered (it was recorded), with `receipt_error`.
#[test]
fn without_a_log_key_the_answer_carries_a_receipt_error() {
    let Some(url) =
        cra_store::testing::postgres_url("without_a_log_key_the_answer_carries_a_receipt_error")
    else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "cli_receipts_unsigned");
    let mut live = Live::start(Some((&url, schema.name())));
    let (st, body) = live.call("GET", AGENT, "/v1/log/key", None);
    assert_eq!(
        (st, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    let (st, body) = live.call("POST", OPERATOR, "/v1/log/checkpoint", None);
    assert_eq!(
        (st, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    let session = live.open_session("no key");
    let req = live.resolve_request("test.trace.ops", &session, "read the runbook", &["read"]);
    let (st, answer) = live.call("POST", AGENT, "/v1/resolve?receipt=true", Some(&req));
    assert_eq!(st, 200, "{answer}");
    assert_eq!(answer["decision"]["type"], "allow", "{answer}");
    assert!(answer.get("receipt").is_none(), "{answer}");
    assert_eq!(answer["receipt_error"]["error"], "unavailable", "{answer}");
    // the resolution was recorded: its completion is the chain's last event
    let (st, trace) = live.call("GET", AGENT, &format!("/v1/traces/{session}"), None);
    assert_eq!(st, 200, "{trace}");
    let events = trace.as_array().unwrap();
    assert_eq!(
        events.last().unwrap()["event_type"],
        "carp.resolution.completed"
    );
    live.stop();
}

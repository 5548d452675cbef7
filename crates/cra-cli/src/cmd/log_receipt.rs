//! `cra log verify-receipt`: checks a receipt (`specs/tlog.md`, "Receipts") offline, with no
//! server: the event's hash is recomputed from the event, the decision hash from its payload,
//! the `tlog-proof@v1` proves the event's hash is the leaf at `leaf_index` of a checkpoint signed
//! by the pinned log key, and, when witness keys are given, enough of them cosigned that
//! checkpoint. Exit 0 when it holds, 2 when it does not, 1 when it could not be checked.

use std::path::PathBuf;

use clap::Args;
use cra_tlog::{CosignatureVerifier, Ed25519Verifier, TlogProof, Verifiers};
use cra_trace::TraceEvent;
use serde::Serialize;
use serde_json::json;

use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra log verify-receipt` options.
#[derive(Debug, Args)]
pub struct VerifyReceiptArgs {
    /// The receipt: the `receipt` member of a resolve or execute answered with
    /// `?receipt=true`, or the answer of `GET /v1/log/receipt` (`-` reads standard input).
    pub receipt: PathBuf,
    /// The log's verifier key string, or a file holding it.
    #[arg(long)]
    pub log_key: String,
    /// A witness's cosignature verifier key string (or a file holding it); repeat for each.
    #[arg(long = "witness-key")]
    pub witness_keys: Vec<String>,
    /// How many of the witness keys must have cosigned the checkpoint (default: all given).
    #[arg(long)]
    pub witnesses: Option<usize>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// What a receipt proves, once checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReceiptCheck {
    /// The chain the event is in.
    pub session_id: String,
    /// Its place in the chain.
    pub sequence: u64,
    /// Its type.
    pub event_type: String,
    /// Its hash (the leaf's data).
    pub event_hash: String,
    /// The digest of its payload.
    pub decision_hash: String,
    /// Its leaf index.
    pub leaf_index: u64,
    /// The log's origin.
    pub origin: String,
    /// The size of the checkpoint it is proved in.
    pub tree_size: u64,
    /// The witnesses whose cosignature of that checkpoint verified.
    pub witnesses: Vec<String>,
}

/// Why a receipt could not be checked (1) or does not hold (2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptFailure {
    /// A file or a key could not be read.
    Unreadable(String),
    /// The receipt does not prove what it claims.
    Invalid(String),
}

/// Runs `cra log verify-receipt`.
pub fn run(args: &VerifyReceiptArgs) -> Exit {
    match verify_receipt(args) {
        Ok(check) => {
            match args.output {
                OutputFormat::Json => println!("{}", json!({"valid": true, "receipt": check})),
                OutputFormat::Text => println!(
                    "valid: event {} of session {} ({}) is leaf {} of the checkpoint of {} leaves signed by {}{}",
                    check.sequence,
                    check.session_id,
                    check.event_type,
                    check.leaf_index,
                    check.tree_size,
                    check.origin,
                    if check.witnesses.is_empty() {
                        String::new()
                    } else {
                        format!(", cosigned by {}", check.witnesses.join(", "))
                    }
                ),
            }
            Exit::Success
        }
        Err(ReceiptFailure::Invalid(why)) => {
            match args.output {
                OutputFormat::Json => println!("{}", json!({"valid": false, "reason": why})),
                OutputFormat::Text => println!("invalid: {why}"),
            }
            Exit::Negative
        }
        Err(ReceiptFailure::Unreadable(why)) => {
            eprintln!("cra log verify-receipt: {why}");
            Exit::CouldNotRun
        }
    }
}

/// Checks the receipt `args.receipt` against the pinned keys.
///
/// # Errors
/// [`ReceiptFailure`]: unreadable input, or a receipt that does not hold (saying which step).
pub fn verify_receipt(args: &VerifyReceiptArgs) -> Result<ReceiptCheck, ReceiptFailure> {
    let unreadable = ReceiptFailure::Unreadable;
    let invalid = |m: String| ReceiptFailure::Invalid(m);
    let log_key = Ed25519Verifier::parse(&crate::cmd::trace_proof::key_text(&args.log_key))
        .map_err(|e| unreadable(format!("--log-key is not a log verifier key string: {e}")))?;
    let witnesses = args
        .witness_keys
        .iter()
        .map(|k| {
            CosignatureVerifier::parse(&crate::cmd::trace_proof::key_text(k)).map_err(|e| {
                unreadable(format!(
                    "--witness-key `{k}` is not a cosignature verifier key: {e}"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let required = args.witnesses.unwrap_or(witnesses.len());
    if required > witnesses.len() {
        return Err(unreadable(format!(
            "--witnesses {required} asks for more cosignatures than the {} --witness-key given",
            witnesses.len()
        )));
    }
    let text = crate::cmd::resolve::read_text(&args.receipt)
        .map_err(|e| unreadable(format!("cannot read {}: {e}", args.receipt.display())))?;
    let receipt: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| invalid(format!("the receipt is not JSON: {e}")))?;
    let receipt = receipt.get("receipt").unwrap_or(&receipt);
    let event: TraceEvent = serde_json::from_value(receipt["event"].clone())
        .map_err(|e| invalid(format!("`event` is not a TRACE event: {e}")))?;
    let recomputed = cra_trace::chain::compute_event_hash(&event);
    if recomputed != event.event_hash {
        return Err(invalid(format!(
            "the event's content hashes to {recomputed}, not its `event_hash` {}",
            event.event_hash
        )));
    }
    let decision_hash = cra_wire::hash::canonical_digest(&event.payload);
    if receipt["decision_hash"].as_str() != Some(decision_hash.as_str()) {
        return Err(invalid(format!(
            "`decision_hash` is not the digest of the event's payload ({decision_hash})"
        )));
    }
    let proof = receipt["tlog_proof"]
        .as_str()
        .ok_or_else(|| invalid("the receipt has no `tlog_proof` text".into()))
        .and_then(|t| TlogProof::parse(t).map_err(|e| invalid(format!("`tlog_proof`: {e}"))))?;
    if receipt["leaf_index"].as_u64() != Some(proof.index()) {
        return Err(invalid(format!(
            "`leaf_index` is not the proof's index {}",
            proof.index()
        )));
    }
    let leaf = cra_tlog::hash::from_hex(&event.event_hash)
        .map_err(|e| invalid(format!("the event's `event_hash`: {e}")))?;
    let origin = log_key.name().to_owned();
    let known = Verifiers::new(vec![log_key]).map_err(|e| unreadable(e.to_string()))?;
    let (checkpoint, note) = proof
        .verify(&cra_tlog::leaf_hash(&leaf), &origin, &known)
        .map_err(|e| invalid(format!("the event is not proved to be in the log: {e}")))?;
    let cosigned: Vec<String> = witnesses
        .iter()
        .filter(|w| w.verify_note(&note).is_ok())
        .map(|w| w.name().to_owned())
        .collect();
    if cosigned.len() < required {
        return Err(invalid(format!(
            "the checkpoint has {} of the {required} witness cosignatures required ({})",
            cosigned.len(),
            if cosigned.is_empty() {
                "none verified".to_owned()
            } else {
                cosigned.join(", ")
            }
        )));
    }
    Ok(ReceiptCheck {
        session_id: event.session_id,
        sequence: event.sequence,
        event_type: event.event_type,
        event_hash: event.event_hash,
        decision_hash,
        leaf_index: proof.index(),
        origin,
        tree_size: checkpoint.size(),
        witnesses: cosigned,
    })
}

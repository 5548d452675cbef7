//! Offline proofs of exported chains (issue 26, `specs/tlog.md`): `cra trace export
//! --with-proofs` writes beside each exported chain `<file>.tlog-proof`, a C2SP `tlog-proof@v1`
//! proving the chain's head event (its last) is a leaf of a signed checkpoint of the server's
//! transparency log; `cra trace verify FILE --checkpoint PROOF --log-key KEY` checks it with no
//! server. A chain's head commits to every earlier event through the hash chain, so one proof
//! per chain covers it all.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use cra_tlog::{Ed25519Verifier, Hash, TlogProof, Verifiers};
use cra_wire::Token;

use crate::cmd::trace_io::Failure;

/// Where the proof of the chain exported to `chain` goes.
pub fn proof_path(chain: &Path) -> PathBuf {
    let mut name = chain.as_os_str().to_owned();
    name.push(".tlog-proof");
    PathBuf::from(name)
}

fn unavailable(message: String) -> Failure {
    Failure::new(Token::Unavailable, message)
}

/// The event hash of the last event in a chain file (read from its end, so a large file is not
/// read whole).
///
/// # Errors
/// An unreadable file, or a last line that is not an event with an `event_hash`.
pub fn last_event_hash(chain: &Path) -> Result<String, String> {
    let mut file =
        std::fs::File::open(chain).map_err(|e| format!("cannot read {}: {e}", chain.display()))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut window = 64 * 1024u64;
    loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start))
            .map_err(|e| format!("cannot read {}: {e}", chain.display()))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail)
            .map_err(|e| format!("cannot read {}: {e}", chain.display()))?;
        let text = String::from_utf8_lossy(&tail);
        let mut lines = text.lines().rev().filter(|l| !l.trim().is_empty());
        let last = lines.next();
        // The last line is whole when another line precedes it in the window, or the window
        // holds the whole file.
        if let Some(line) = last
            && (start == 0 || lines.next().is_some())
        {
            let event: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                format!("the last line of {} is not an event: {e}", chain.display())
            })?;
            return event["event_hash"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("the last event of {} has no event_hash", chain.display()));
        }
        if start == 0 {
            return Err(format!("{} holds no event", chain.display()));
        }
        window = window.saturating_mul(4);
    }
}

/// Makes the tlog proof of `event_hash` from the server at `base`: its latest checkpoint (cut
/// anew with `token` when it does not cover the event yet, which needs an operator's key) and
/// the event's inclusion proof in it.
///
/// # Errors
/// A refusal or unreachable server, or a checkpoint that does not cover the event.
pub fn fetch_proof(
    client: &reqwest::blocking::Client,
    base: &str,
    token: &str,
    event_hash: &str,
) -> Result<TlogProof, Failure> {
    let get_text = |request: reqwest::blocking::RequestBuilder, what: &str| {
        let resp = request.send().map_err(|e| {
            let why = cra_runtime::tls::explain(&e);
            unavailable(format!("cannot reach {base} for {what}: {why}"))
        })?;
        let status = resp.status();
        let text = resp
            .text()
            .map_err(|e| unavailable(format!("reading {what}: {e}")))?;
        if status.is_success() {
            Ok(text)
        } else {
            Err(unavailable(format!(
                "the server refused {what} ({}): {}",
                status.as_u16(),
                text.trim()
            )))
        }
    };
    let inclusion = |note: &str| -> Result<Option<(u64, Vec<Hash>)>, Failure> {
        let cp = checkpoint_of(note)?;
        let url = format!(
            "{base}/v1/log/proof/inclusion?event_hash={event_hash}&tree_size={}",
            cp.size()
        );
        let resp = client.get(&url).bearer_auth(token).send().map_err(|e| {
            let why = cra_runtime::tls::explain(&e);
            unavailable(format!("cannot reach {url}: {why}"))
        })?;
        if resp.status().as_u16() == 400 {
            // Not in a tree of this size yet.
            return Ok(None);
        }
        let status = resp.status();
        let text = resp
            .text()
            .map_err(|e| unavailable(format!("reading {url}: {e}")))?;
        if !status.is_success() {
            return Err(unavailable(format!(
                "the server refused the inclusion proof ({}): {}",
                status.as_u16(),
                text.trim()
            )));
        }
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| unavailable(format!("the inclusion proof is not JSON: {e}")))?;
        let hashes = cra_tlog::proof::proof_from_hex(&hex_hashes(&v))
            .map_err(|e| unavailable(format!("the inclusion proof: {e}")))?;
        let index = v["leaf_index"]
            .as_u64()
            .ok_or_else(|| unavailable("the inclusion proof has no leaf_index".into()))?;
        Ok(Some((index, hashes)))
    };
    let mut note = get_text(
        client.get(format!("{base}/v1/log/checkpoint")),
        "the checkpoint",
    )?;
    let mut found = inclusion(&note)?;
    if found.is_none() {
        note = get_text(
            client
                .post(format!("{base}/v1/log/checkpoint"))
                .bearer_auth(token),
            "a new checkpoint (the latest does not cover this chain's head yet; an operator's key may cut one, or wait for the next)",
        )?;
        found = inclusion(&note)?;
    }
    let (index, hashes) = found.ok_or_else(|| {
        unavailable(
            "no checkpoint covers this chain's head yet; try again after the next one".into(),
        )
    })?;
    TlogProof::new(None, index, hashes, &note)
        .map_err(|e| unavailable(format!("the server's checkpoint: {e}")))
}

/// Makes the tlog proof of `event_hash` from a stopped store's own log: its latest published
/// checkpoint and the event's inclusion proof in it, read from the stored tiles. Nothing is
/// signed here, so the checkpoint must already cover the event.
///
/// # Errors
/// The store has no checkpoint, the event is not a leaf, or the latest checkpoint is older than
/// the event (the message says how to get one).
pub fn store_proof(
    log: &dyn cra_store::tlog::LogStore,
    event_hash: &str,
) -> Result<TlogProof, Failure> {
    let failed = |e: cra_store::tlog::LogError| unavailable(format!("the store's log: {e}"));
    let note = log.checkpoints(1).map_err(failed)?.into_iter().next().ok_or_else(|| {
        unavailable(
            "the store's log has no signed checkpoint yet; start the server on it (it cuts one on its timer) and export again".into(),
        )
    })?;
    let size = checkpoint_of(&note)?.size();
    let leaf: Hash = cra_tlog::hash::from_hex(event_hash)
        .map_err(|e| unavailable(format!("`{event_hash}` is not an event hash: {e}")))?;
    let place = log.leaf_place(&leaf).map_err(failed)?.ok_or_else(|| {
        unavailable(format!(
            "event {event_hash} is not a leaf of the store's log; was the chain exported from another store?"
        ))
    })?;
    if place.leaf_index >= size {
        return Err(unavailable(format!(
            "the store's latest checkpoint (size {size}) does not cover this chain's head (leaf {}) yet; start the server on it, which cuts one on its timer (or POST /v1/log/checkpoint), then export again",
            place.leaf_index
        )));
    }
    let hashes = cra_store::tlog::LogReader::at(log, size)
        .inclusion(place.leaf_index, size)
        .map_err(failed)?;
    TlogProof::new(None, place.leaf_index, hashes, &note)
        .map_err(|e| unavailable(format!("the store's checkpoint: {e}")))
}

/// The `hashes` member of a proof answer of `/v1/log/proof/*` (hex strings; anything else is
/// left out, so the proof then fails verification by its length).
pub fn hex_hashes(answer: &serde_json::Value) -> Vec<String> {
    answer["hashes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| h.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn checkpoint_of(note: &str) -> Result<cra_tlog::Checkpoint, Failure> {
    let parsed = cra_tlog::Note::parse(note.as_bytes())
        .map_err(|e| unavailable(format!("the server's checkpoint is not a signed note: {e}")))?;
    cra_tlog::Checkpoint::parse(parsed.text())
        .map_err(|e| unavailable(format!("the server's checkpoint: {e}")))
}

/// A key string given on the command line, or read from the file it names; trimmed.
pub fn key_text(given: &str) -> String {
    std::fs::read_to_string(given).map_or_else(|_| given.trim().to_owned(), |t| t.trim().to_owned())
}

/// What an offline check of a chain's tlog proof found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofCheck {
    /// The log's origin.
    pub origin: String,
    /// The head event's leaf index.
    pub leaf_index: u64,
    /// The size of the checkpoint it is proved in.
    pub tree_size: u64,
}

/// Checks that the last event of `chain` is proved by the tlog proof in `proof` to be a leaf of a
/// checkpoint signed by `log_key` (a verifier key string, or a file holding one).
///
/// # Errors
/// Why the proof does not hold, for people.
pub fn check_proof(chain: &Path, proof: &Path, log_key: &str) -> Result<ProofCheck, String> {
    let verifier = Ed25519Verifier::parse(&key_text(log_key))
        .map_err(|e| format!("--log-key is not a verifier key string: {e}"))?;
    let origin = verifier.name().to_owned();
    let verifiers = Verifiers::new(vec![verifier]).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(proof)
        .map_err(|e| format!("cannot read {}: {e}", proof.display()))?;
    let parsed = TlogProof::parse(&text)
        .map_err(|e| format!("{} is not a tlog-proof@v1: {e}", proof.display()))?;
    let head = last_event_hash(chain)?;
    let leaf = cra_tlog::hash::from_hex(&head)
        .map_err(|e| format!("the chain's last event_hash `{head}`: {e}"))?;
    let (checkpoint, _) = parsed
        .verify(&cra_tlog::leaf_hash(&leaf), &origin, &verifiers)
        .map_err(|e| format!("the chain's head is not proved to be in the log: {e}"))?;
    Ok(ProofCheck {
        origin,
        leaf_index: parsed.index(),
        tree_size: checkpoint.size(),
    })
}

//! C2SP `tlog-witness` (c2sp.org/tlog-witness), the `add-checkpoint` call without the HTTP: the
//! request body read into typed parts, and the witness's decision (cosign, or refuse with the
//! status code the spec names).
//!
//! A request body is
//!
//! ```text
//! old <size the client believes the witness has, decimal>
//! <base64 consistency proof hash>...   (at most 63)
//!
//! <signed checkpoint note>
//! ```
//!
//! The decision is two steps so a server can do the costly one outside its lock:
//! [`Witness::open`] needs no state (parse, origin, log signature: 400, 404, 403, and 400 for an
//! old size above the checkpoint's); [`Witness::decide`] compares with the latest cosigned
//! state of the origin and cosigns (409, 422, or a new state and the cosignature). A server
//! must run `decide` and persist its result as one atomic step per origin.
//!
//! # Invariants (tested by name, `tests/tlog/witness.rs`)
//! * a growing log is cosigned at every size and each cosignature verifies
//!   (`a_growing_log_is_cosigned_step_by_step`);
//! * every refusal has the spec's status, checked in the spec's order
//!   (`every_refusal_has_the_spec_status`);
//! * a flipped byte of proof, checkpoint or signature is refused, never cosigned
//!   (`a_flipped_byte_is_never_cosigned`).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::cosignature::{CosignatureError, CosignatureSigner};
use crate::hash::{self, Hash, empty_root};
use crate::note::{Ed25519Verifier, Note, NoteError, Signature, Verifiers};
use crate::proof::{VerifyError, verify_consistency};

/// The most consistency proof lines a request may carry.
pub const MAX_PROOF_LINES: usize = 63;

/// The `Content-Type` of a 409 response, whose body is the latest cosigned size and a newline.
pub const SIZE_CONTENT_TYPE: &str = "text/x.tlog.size";

/// Why the witness refuses a request; [`WitnessError::status`] is the HTTP status the spec
/// names for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WitnessError {
    /// The body is not an old size line, proof lines, a blank line and a note (400).
    #[error(
        "malformed add-checkpoint request: {why}; the body is `old <size>`, up to 63 base64 proof hashes, a blank line, then the signed checkpoint, every line ending in a newline"
    )]
    Malformed {
        /// What is wrong.
        why: String,
    },
    /// The checkpoint note or body does not parse (400).
    #[error("the submitted checkpoint is malformed: {0}")]
    BadCheckpoint(CheckpointError),
    /// The witness has no key for the origin (404).
    #[error(
        "this witness does not witness the log {origin:?}; ask its operator to add the log's key"
    )]
    UnknownOrigin {
        /// The checkpoint's origin.
        origin: String,
    },
    /// No valid signature by a key of the log, or a known key's signature fails (403).
    #[error("the checkpoint is not validly signed by the log: {0}")]
    Unverified(NoteError),
    /// The old size is above the checkpoint's size (400).
    #[error("old size {old} is above the checkpoint's size {size}; a log does not shrink")]
    OldAboveSize {
        /// The old size of the request.
        old: u64,
        /// The checkpoint's size.
        size: u64,
    },
    /// The old size is not the latest size this witness cosigned (409).
    #[error(
        "old size {old} is not the size this witness last cosigned for the log, {latest}; resubmit with `old {latest}` and a proof from it"
    )]
    Conflict {
        /// The old size of the request.
        old: u64,
        /// The latest cosigned size (0 if never).
        latest: u64,
    },
    /// A checkpoint of size zero whose root is not the empty tree's (422).
    #[error(
        "a checkpoint of size 0 has the root of the empty tree, SHA-256 of nothing; this one does not"
    )]
    EmptyTreeRoot,
    /// A non-empty proof from the empty tree (422).
    #[error(
        "the consistency proof from size 0 is empty, because the empty tree extends to any tree; this one has {lines} hashes"
    )]
    ProofFromEmpty {
        /// Its length.
        lines: usize,
    },
    /// The consistency proof does not verify, or the same size has another root (422).
    #[error("the checkpoint is not consistent with the one this witness cosigned: {0}")]
    Inconsistent(VerifyError),
    /// The clock gave a time the cosignature cannot carry (500).
    #[error("the witness cannot cosign now: {0}")]
    Cosign(CosignatureError),
}

impl WitnessError {
    /// The HTTP status code the spec names for this refusal.
    pub fn status(&self) -> u16 {
        match self {
            Self::Malformed { .. } | Self::BadCheckpoint(_) | Self::OldAboveSize { .. } => 400,
            Self::Unverified(_) => 403,
            Self::UnknownOrigin { .. } => 404,
            Self::Conflict { .. } => 409,
            Self::EmptyTreeRoot | Self::ProofFromEmpty { .. } | Self::Inconsistent(_) => 422,
            Self::Cosign(_) => 500,
        }
    }

    /// The body of the 409 response (`<latest size>\n`, of type [`SIZE_CONTENT_TYPE`]), for a
    /// conflict.
    pub fn conflict_body(&self) -> Option<String> {
        match self {
            Self::Conflict { latest, .. } => Some(format!("{latest}\n")),
            _ => None,
        }
    }
}

fn malformed(why: impl Into<String>) -> WitnessError {
    WitnessError::Malformed { why: why.into() }
}

/// An `add-checkpoint` request body read into its parts; the note is not yet verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The old size.
    pub old_size: u64,
    /// The consistency proof from the old size to the checkpoint's.
    pub proof: Vec<Hash>,
    /// The signed checkpoint note, as sent.
    pub checkpoint: Vec<u8>,
}

impl AddCheckpoint {
    /// Reads a request body.
    ///
    /// # Errors
    /// [`WitnessError::Malformed`] (400) naming the first thing wrong.
    pub fn parse(body: &[u8]) -> Result<Self, WitnessError> {
        let (first, mut rest) = split_line(body).ok_or_else(|| malformed("no old size line"))?;
        let old_size = std::str::from_utf8(first)
            .ok()
            .and_then(|l| l.strip_prefix("old "))
            .and_then(parse_decimal)
            .ok_or_else(|| {
                malformed(
                    "the first line is not `old <size>` with the size in decimal without leading zeroes",
                )
            })?;
        let mut proof = Vec::new();
        loop {
            let (line, after) = split_line(rest)
                .ok_or_else(|| malformed("no blank line ends the consistency proof"))?;
            rest = after;
            if line.is_empty() {
                break;
            }
            if proof.len() == MAX_PROOF_LINES {
                return Err(malformed(format!(
                    "more than {MAX_PROOF_LINES} consistency proof lines"
                )));
            }
            let hash = std::str::from_utf8(line)
                .ok()
                .and_then(|l| hash::from_base64(l).ok())
                .ok_or_else(|| {
                    malformed(format!(
                        "consistency proof line {} is not a base64 SHA-256 hash",
                        proof.len() + 1
                    ))
                })?;
            proof.push(hash);
        }
        if rest.is_empty() {
            return Err(malformed("no checkpoint follows the blank line"));
        }
        Ok(Self {
            old_size,
            proof,
            checkpoint: rest.to_vec(),
        })
    }

    /// The request body these parts make.
    pub fn to_body(&self) -> Vec<u8> {
        let mut out = format!("old {}\n", self.old_size).into_bytes();
        for hash in &self.proof {
            out.extend_from_slice(hash::to_base64(hash).as_bytes());
            out.push(b'\n');
        }
        out.push(b'\n');
        out.extend_from_slice(&self.checkpoint);
        out
    }
}

/// The line before the first newline and what follows it; `None` without a newline.
fn split_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == b'\n')?;
    Some((bytes.get(..at)?, bytes.get(at + 1..)?))
}

/// A canonical decimal u64: digits only, no leading zero unless it is `0`.
fn parse_decimal(text: &str) -> Option<u64> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

/// The latest checkpoint a witness cosigned for one log: what it keeps per origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogState {
    /// The tree size.
    pub size: u64,
    /// The root hash.
    pub root: Hash,
}

/// A request that passed the stateless checks: parsed, of a known log, signed by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The request's parts.
    pub request: AddCheckpoint,
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// The checkpoint note as sent (the log's signatures and any others).
    pub note: Note,
}

/// A cosigned checkpoint: the state to persist and the response to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The new latest state of the log.
    pub state: LogState,
    /// The witness's cosignature line.
    pub cosignature: Signature,
    /// The submitted note with the cosignature added (what the monitoring endpoint serves).
    pub cosigned: Note,
}

impl Accepted {
    /// The 200 response body: the cosignature line(s).
    pub fn response_body(&self) -> String {
        self.cosignature.to_line()
    }
}

/// Why a witness could not be configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WitnessConfigError {
    /// No log key was given.
    #[error("a witness needs at least one log verifier key; pass each log's key")]
    NoLogs,
    /// Two keys of one origin share a key ID.
    #[error("the log keys are ambiguous: {0}")]
    Keys(NoteError),
}

/// A witness: its cosigner and the logs it witnesses (origin → the log's verifier keys).
#[derive(Debug)]
pub struct Witness {
    cosigner: CosignatureSigner,
    logs: BTreeMap<String, Verifiers>,
}

impl Witness {
    /// A witness of the logs whose keys are given; a log's origin is its key's name, and an
    /// origin may have several keys (rotation).
    ///
    /// # Errors
    /// [`WitnessConfigError`].
    pub fn new(
        cosigner: CosignatureSigner,
        log_keys: Vec<Ed25519Verifier>,
    ) -> Result<Self, WitnessConfigError> {
        if log_keys.is_empty() {
            return Err(WitnessConfigError::NoLogs);
        }
        let mut grouped: BTreeMap<String, Vec<Ed25519Verifier>> = BTreeMap::new();
        for key in log_keys {
            grouped.entry(key.name().to_owned()).or_default().push(key);
        }
        let mut logs = BTreeMap::new();
        for (origin, keys) in grouped {
            logs.insert(
                origin,
                Verifiers::new(keys).map_err(WitnessConfigError::Keys)?,
            );
        }
        Ok(Self { cosigner, logs })
    }

    /// The cosigner.
    pub fn cosigner(&self) -> &CosignatureSigner {
        &self.cosigner
    }

    /// The origins witnessed, in order.
    pub fn origins(&self) -> impl Iterator<Item = &str> {
        self.logs.keys().map(String::as_str)
    }

    /// The checks that need no state, in the spec's order: the body parses (400), the origin is
    /// known (404), the log signed it and no known key's signature fails (403), the old size is
    /// not above the checkpoint's (400).
    ///
    /// # Errors
    /// A [`WitnessError`] with its status.
    pub fn open(&self, body: &[u8]) -> Result<Submission, WitnessError> {
        let request = AddCheckpoint::parse(body)?;
        let note = Note::parse(&request.checkpoint)
            .map_err(|e| WitnessError::BadCheckpoint(CheckpointError::Note(e)))?;
        let checkpoint = Checkpoint::parse(note.text()).map_err(WitnessError::BadCheckpoint)?;
        let known =
            self.logs
                .get(checkpoint.origin())
                .ok_or_else(|| WitnessError::UnknownOrigin {
                    origin: checkpoint.origin().to_owned(),
                })?;
        note.verify(known).map_err(WitnessError::Unverified)?;
        if request.old_size > checkpoint.size() {
            return Err(WitnessError::OldAboveSize {
                old: request.old_size,
                size: checkpoint.size(),
            });
        }
        Ok(Submission {
            request,
            checkpoint,
            note,
        })
    }

    /// The checks against the latest state cosigned for the origin (`None`: never), then the
    /// cosignature at `timestamp` (POSIX seconds): the old size is the latest size (409), an
    /// empty tree has the empty root (422), the proof verifies from the latest root (422).
    ///
    /// # Errors
    /// A [`WitnessError`] with its status.
    pub fn decide(
        &self,
        submission: &Submission,
        latest: Option<&LogState>,
        timestamp: u64,
    ) -> Result<Accepted, WitnessError> {
        let (old, cp) = (submission.request.old_size, &submission.checkpoint);
        let proof = &submission.request.proof;
        let latest_size = latest.map_or(0, |s| s.size);
        if old != latest_size {
            return Err(WitnessError::Conflict {
                old,
                latest: latest_size,
            });
        }
        if cp.size() == 0 && *cp.root() != empty_root() {
            return Err(WitnessError::EmptyTreeRoot);
        }
        if old == 0 {
            if !proof.is_empty() {
                return Err(WitnessError::ProofFromEmpty { lines: proof.len() });
            }
        } else {
            // old == latest_size > 0, so a latest state exists
            let old_root = latest.map_or_else(empty_root, |s| s.root);
            verify_consistency(old, cp.size(), &old_root, cp.root(), proof)
                .map_err(WitnessError::Inconsistent)?;
        }
        let cosignature = self
            .cosigner
            .sign(submission.note.text(), timestamp)
            .map_err(WitnessError::Cosign)?;
        let mut cosigned = submission.note.clone();
        cosigned
            .add_signature(cosignature.clone())
            .map_err(|e| WitnessError::BadCheckpoint(CheckpointError::Note(e)))?;
        Ok(Accepted {
            state: LogState {
                size: cp.size(),
                root: *cp.root(),
            },
            cosignature,
            cosigned,
        })
    }
}

/// The origin hash of the monitoring path `<prefix>/<origin hash>/checkpoint`: SHA-256 of the
/// origin, lowercase hex.
pub fn origin_hash(origin: &str) -> String {
    hex::encode(Sha256::digest(origin.as_bytes()))
}

//! C2SP `tlog-proof@v1` (c2sp.org/tlog-proof): an offline-verifiable proof that a leaf is in a
//! log, as text: a header line, optional `extra` data, the leaf index, the inclusion proof (one
//! base64 hash a line), a blank line, and the signed checkpoint note verbatim.
//!
//! ```text
//! c2sp.org/tlog-proof@v1
//! [extra <base64>]
//! index <decimal>
//! <base64 hash>...
//!
//! <signed checkpoint note>
//! ```
//!
//! # Invariants (tested by name)
//! * formatting a parsed proof gives the same text (`tlog_proofs_round_trip`);
//! * [`TlogProof::verify`] accepts a leaf only through a verified checkpoint of the expected
//!   origin and an inclusion proof to its root (`a_tlog_proof_verifies_only_its_leaf`).
//!
//! Witness cosignatures (c2sp.org/tlog-cosignature) travel in the note; policy on them is the
//! caller's (signatures by keys not in the verifier set are ignored).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::hash::{self, Hash};
use crate::note::{Note, Verifiers};
use crate::proof::{VerifyError, verify_inclusion};

/// The first line of a tlog proof.
pub const TLOG_PROOF_HEADER: &str = "c2sp.org/tlog-proof@v1";

/// Why a tlog proof could not be read or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlogProofError {
    /// The text is not a tlog proof.
    #[error("not a {TLOG_PROOF_HEADER} proof: {why}")]
    Malformed {
        /// What is wrong.
        why: &'static str,
    },
    /// An inclusion proof line is not a base64 hash.
    #[error("inclusion proof line {line} is not a base64 SHA-256 hash: {error}")]
    BadHash {
        /// Its 1-based position among the proof lines.
        line: usize,
        /// What is wrong with it.
        error: hash::HashError,
    },
    /// The checkpoint note is malformed, unverified or of another origin.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The inclusion proof does not bind the leaf to the checkpoint's root.
    #[error(transparent)]
    Inclusion(#[from] VerifyError),
}

/// A parsed tlog proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlogProof {
    extra: Option<Vec<u8>>,
    index: u64,
    inclusion: Vec<Hash>,
    checkpoint: String,
}

impl TlogProof {
    /// A proof of leaf `index` with its inclusion proof, and the signed checkpoint note's text.
    ///
    /// # Errors
    /// [`TlogProofError::Checkpoint`] when `checkpoint` is not a well-formed note.
    pub fn new(
        extra: Option<Vec<u8>>,
        index: u64,
        inclusion: Vec<Hash>,
        checkpoint: &str,
    ) -> Result<Self, TlogProofError> {
        Note::parse(checkpoint.as_bytes()).map_err(CheckpointError::from)?;
        Ok(Self {
            extra,
            index,
            inclusion,
            checkpoint: checkpoint.to_owned(),
        })
    }

    /// Reads a tlog proof; the checkpoint note is checked for form, not yet verified.
    ///
    /// # Errors
    /// A [`TlogProofError`] naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, TlogProofError> {
        let bad = |why| TlogProofError::Malformed { why };
        let rest = text
            .strip_prefix(TLOG_PROOF_HEADER)
            .and_then(|r| r.strip_prefix('\n'))
            .ok_or(bad("the first line is not c2sp.org/tlog-proof@v1"))?;
        let (head, checkpoint) = rest
            .split_once("\n\n")
            .ok_or(bad("no blank line before the checkpoint"))?;
        let mut lines = head.split('\n');
        let mut line = lines.next().unwrap_or_default();
        let mut extra = None;
        if let Some(encoded) = line.strip_prefix("extra ") {
            extra = Some(
                STANDARD
                    .decode(encoded)
                    .map_err(|_| bad("extra is not base64"))?,
            );
            line = lines.next().ok_or(bad("no index line"))?;
        }
        let index = line.strip_prefix("index ").ok_or(bad("no index line"))?;
        let index =
            parse_index(index).ok_or(bad("the index is not a decimal without leading zeroes"))?;
        let mut inclusion = Vec::new();
        for (i, line) in lines.enumerate() {
            let hash = hash::from_base64(line)
                .map_err(|error| TlogProofError::BadHash { line: i + 1, error })?;
            inclusion.push(hash);
        }
        Self::new(extra, index, inclusion, checkpoint)
    }

    /// The proof as text.
    pub fn to_text(&self) -> String {
        let mut out = format!("{TLOG_PROOF_HEADER}\n");
        if let Some(extra) = &self.extra {
            out.push_str(&format!("extra {}\n", STANDARD.encode(extra)));
        }
        out.push_str(&format!("index {}\n", self.index));
        for hash in &self.inclusion {
            out.push_str(&hash::to_base64(hash));
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&self.checkpoint);
        out
    }

    /// The unauthenticated extra data, if any.
    pub fn extra(&self) -> Option<&[u8]> {
        self.extra.as_deref()
    }

    /// The leaf index.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The inclusion proof.
    pub fn inclusion(&self) -> &[Hash] {
        &self.inclusion
    }

    /// The signed checkpoint note's text.
    pub fn checkpoint_note(&self) -> &str {
        &self.checkpoint
    }

    /// Verifies that `leaf` (a leaf hash) is in the log `origin`: the checkpoint note verifies
    /// against `known` and is of `origin`, and the inclusion proof leads from `leaf` at the
    /// proof's index to the checkpoint's root. Returns the checkpoint and its note (for a
    /// witness policy).
    ///
    /// # Errors
    /// [`TlogProofError::Checkpoint`] or [`TlogProofError::Inclusion`].
    pub fn verify(
        &self,
        leaf: &Hash,
        origin: &str,
        known: &Verifiers,
    ) -> Result<(Checkpoint, Note), TlogProofError> {
        let (checkpoint, note) = Checkpoint::open(self.checkpoint.as_bytes(), origin, known)?;
        verify_inclusion(
            leaf,
            self.index,
            checkpoint.size(),
            &self.inclusion,
            checkpoint.root(),
        )?;
        Ok((checkpoint, note))
    }
}

fn parse_index(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if !canonical {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::leaf_hash;
    use crate::note::Ed25519Signer;
    use crate::proof::{MemoryTree, inclusion_proof};

    fn fixture() -> (TlogProof, Hash, Verifiers) {
        let leaves: Vec<Hash> = (0..11u8).map(|i| leaf_hash(&[i])).collect();
        let tree = MemoryTree::from_leaf_hashes(&leaves);
        let Ok(signer) = Ed25519Signer::from_seed("log.example", &[1; 32]) else {
            unreachable!()
        };
        let Ok(cp) = Checkpoint::new("log.example", 11, tree.root()) else {
            unreachable!()
        };
        let Ok(note) = cp.sign(&signer) else {
            unreachable!()
        };
        let Ok(proof) = inclusion_proof(&tree, 6, 11) else {
            unreachable!()
        };
        let Ok(p) = TlogProof::new(Some(b"ctx".to_vec()), 6, proof, &note.to_text()) else {
            unreachable!()
        };
        (
            p,
            leaves[6],
            Verifiers::new(vec![signer.verifier()]).unwrap_or_default(),
        )
    }

    #[test]
    fn tlog_proofs_round_trip() {
        let (p, _, _) = fixture();
        let text = p.to_text();
        assert!(text.starts_with("c2sp.org/tlog-proof@v1\nextra Y3R4\nindex 6\n"));
        assert_eq!(TlogProof::parse(&text), Ok(p.clone()));
        let without = TlogProof { extra: None, ..p };
        assert_eq!(TlogProof::parse(&without.to_text()), Ok(without));
        assert!(TlogProof::parse("c2sp.org/tlog-proof@v1\nindex 01\n\nx").is_err());
    }

    #[test]
    fn a_tlog_proof_verifies_only_its_leaf() {
        let (p, leaf, known) = fixture();
        assert!(p.verify(&leaf, "log.example", &known).is_ok());
        assert!(matches!(
            p.verify(&leaf_hash(b"other"), "log.example", &known),
            Err(TlogProofError::Inclusion(VerifyError::RootMismatch { .. }))
        ));
        assert!(matches!(
            p.verify(&leaf, "log.example/other", &known),
            Err(TlogProofError::Checkpoint(
                CheckpointError::NotSignedByLog { .. }
            ))
        ));
    }
}

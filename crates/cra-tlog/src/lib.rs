//! `cra-tlog`: the transparency-log protocol of cra's TRACE log (issue 26), with no I/O, no
//! clock and no randomness (keys and seeds are handed in).
//!
//! Every TRACE event is a leaf: its leaf data is the 32 raw bytes of its `event_hash`. The
//! decisions are in `specs/tlog.md`.
//!
//! * [`hash`]: RFC 6962 leaf and node hashes, the Merkle Tree Hash of a list of leaves, the hex
//!   and base64 forms of a hash.
//! * [`proof`]: the [`HashReader`] seam stores answer, inclusion and consistency proofs (RFC 9162
//!   §2.1.3, §2.1.4) made from it and verified, and the in-memory [`MemoryTree`].
//! * [`note`]: C2SP signed notes with Ed25519 signers and verifiers and their key strings.
//! * [`checkpoint`]: C2SP tlog-checkpoint bodies, signed and opened as notes.
//! * [`tiles`]: C2SP tlog-tiles coordinates and paths, tile contents from stored hashes, and a
//!   [`HashReader`] over tiles.
//! * [`tlog_proof`]: C2SP `tlog-proof@v1`, the offline proof of one leaf.
//! * [`cosignature`]: C2SP `tlog-cosignature`, the Ed25519 `cosignature/v1` witnesses sign.
//! * [`witness`]: C2SP `tlog-witness`: the `add-checkpoint` request and the witness's decision,
//!   with the status code of each refusal.

pub mod checkpoint;
pub mod cosignature;
pub mod hash;
pub mod note;
pub mod proof;
pub mod tiles;
pub mod tlog_proof;
pub mod witness;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use cosignature::{CosignatureError, CosignatureSigner, CosignatureVerifier};
pub use hash::{Hash, HashError, empty_root, leaf_hash, node_hash, root_of};
pub use note::{Ed25519Signer, Ed25519Verifier, Note, NoteError, Signature, Verifiers};
pub use proof::{
    HashReadError, HashReader, MemoryTree, ProofError, VerifyError, consistency_proof,
    inclusion_proof, root, verify_consistency, verify_inclusion,
};
pub use tiles::{Tile, TileError, TileHashReader, TileKind, TileReader};
pub use tlog_proof::{TlogProof, TlogProofError};
pub use witness::{AddCheckpoint, LogState, Witness, WitnessError};

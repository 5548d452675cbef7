//! The integration tests of `cra-tlog`, one binary:
//!
//! * `vectors`: the RFC 6962 reference vectors (`tests/fixtures/rfc6962_vectors.txt`);
//! * `azul_note`: notes and checkpoints against Cloudflare's `signed_note` and `tlog_tiles`;
//! * `azul_tlog`: proofs, tile paths and tile contents against `tlog_tiles`;
//! * `tamper`: every flipped byte of a proof, checkpoint or signature fails;
//! * `properties`: the tiles reader agrees with the in-memory tree;
//! * `witness`: the witness's decisions over real checkpoints of a growing tree, every refusal
//!   status of C2SP `tlog-witness`, and flipped bytes never cosigned;
//! * `python`: the independent verifier `tools/tlog_verify.py` accepts what cra-tlog makes and
//!   rejects it tampered.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod azul_note;
mod azul_tlog;
mod properties;
mod python;
mod support;
mod tamper;
mod vectors;
mod witness;

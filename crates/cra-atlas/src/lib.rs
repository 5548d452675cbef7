//! `cra-atlas`: the Atlas/1.0 package format.
//!
//! * [`model`]: manifest, capability, context pack, policy and action types (unknown fields kept).
//! * [`load`](mod@load): reading an atlas directory or packed archive into a [`LoadedAtlas`] with its digest.
//! * [`validate`]: JSON Schema, id, version and cross-reference checks producing [`Diagnostic`]s.
//! * [`diag`]: diagnostics (file, JSON pointer, line) and pointer-to-line mapping.
//! * [`pattern`]: policy action patterns (`*`, `**`), shared with CARP's evaluator.
//! * [`pack`]: deterministic `.atlas.tar.gz` archives and safe unpacking.
//! * [`redaction`]: redaction rules (JSON pointers, patterns) over an agent's request, the
//!   format of an atlas's `redaction` and of the operator's `[[redaction.rules]]`.
//! * [`registry`]: many atlases and versions, range resolution, atomic reload.
//! * [`fmt`]: canonical formatting of atlas JSON files.
//! * [`adapters`]: OpenAI, Anthropic and MCP tool descriptors generated from actions.
//! * [`scaffold`]: the skeleton atlas `cra atlas init` writes.
//! * [`mcp_import`]: the atlas `cra atlas import-mcp` writes for an MCP server cra did not write.
//! * [`signing`]: signed atlases: an SSH signature over the atlas digest, where it lives, which
//!   keys are trusted.
//! * [`sshsig`]: OpenSSH signatures (SSHSIG) and Ed25519 OpenSSH keys, read and written.

pub mod adapters;
pub mod diag;
pub mod fmt;
pub mod load;
pub mod mcp_import;
pub mod model;
pub mod pack;
pub mod pattern;
pub mod redaction;
pub mod registry;
pub mod scaffold;
pub mod signing;
pub mod sshsig;
pub mod validate;

pub use diag::{Diagnostic, Severity};
pub use load::{LoadError, LoadedAtlas, Origin, atlas_digest, load, load_dir};
pub use model::{
    Action, Capability, Conditions, ContextPack, Manifest, Policy, PolicyType, RiskTier, TimeWindow,
};
pub use registry::{Registry, RegistryError};

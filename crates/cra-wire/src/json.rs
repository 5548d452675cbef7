//! Strict JSON reading for untrusted input: refuses duplicate object keys (two parsers could see
//! two different documents), nesting deeper than a limit, and anything RFC 8259 forbids; numbers
//! are kept exactly as written.
//!
//! OWNER: the TRACE-core work (issue 2) completes this module.

use serde_json::Value;

/// The deepest nesting accepted from untrusted input.
pub const MAX_DEPTH: usize = 128;

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all, or truncated.
    #[error("not valid JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser expected.
        message: String,
    },
    /// The same key appears twice in one object.
    #[error("duplicate key `{key}` in the object at `{pointer}`: each key may appear once")]
    DuplicateKey {
        /// JSON pointer of the object.
        pointer: String,
        /// The repeated key.
        key: String,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {limit} levels at `{pointer}`")]
    TooDeep {
        /// JSON pointer where the limit was passed.
        pointer: String,
        /// The limit.
        limit: usize,
    },
}

/// Parses `input` strictly (see the module documentation).
pub fn parse_strict(input: &[u8]) -> Result<Value, JsonError> {
    // Temporary: serde_json's own depth limit (128) applies; duplicate-key detection is pending.
    serde_json::from_slice(input).map_err(|e| JsonError::Syntax {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })
}

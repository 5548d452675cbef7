//! Relay profile canonical JSON (relay errata, Appendix A): RFC 8785 numbers, raw UTF-8 strings,
//! keys in UTF-8 byte order, `null` object members dropped at every depth (nulls in arrays kept).
//!
//! OWNER: issue 6 (Relay) replaces this placeholder with the exact implementation.

use serde_json::Value;

/// Why a value has no Relay canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// A number outside the IEEE 754 double range (RFC 8785 has no form for it).
    #[error("the number {0} at `{1}` cannot be represented as an IEEE 754 double")]
    NumberOutOfRange(String, String),
}

/// The Relay-profile canonical form of `value`.
pub fn relay_canonical(value: &Value) -> Result<String, CanonicalError> {
    Ok(value.to_string())
}

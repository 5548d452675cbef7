//! TRACE profile canonical JSON: what the Appendix B Python produces, byte for byte.
//!
//! OWNER: issue 2 (TRACE core) replaces this placeholder with the exact implementation.

use serde_json::Value;

/// The TRACE-profile canonical form of `value`.
pub fn trace_canonical(value: &Value) -> String {
    let mut out = String::new();
    write_trace_canonical(value, &mut out);
    out
}

/// Appends the TRACE-profile canonical form of `value` to `out`.
pub fn write_trace_canonical(value: &Value, out: &mut String) {
    // Placeholder (keys sorted by serde_json's map; no ASCII escaping, no Python float forms).
    out.push_str(&value.to_string());
}

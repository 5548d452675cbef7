//! SHA-256 helpers: lowercase hex digests, and the `sha256:`-prefixed form Relay uses.

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes` as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// SHA-256 of `bytes` in Relay's prefixed form: `sha256:` followed by 64 lowercase hex characters.
pub fn sha256_prefixed(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// True when `s` is exactly 64 lowercase hex characters (the shape of every TRACE hash).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_digest() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(sha256_prefixed(b"").starts_with("sha256:e3b0"));
        assert!(is_sha256_hex(&sha256_hex(b"x")));
        assert!(!is_sha256_hex("E3B0"));
    }
}

//! SHA-256 helpers: lowercase hex digests, the `sha256:`-prefixed form Relay uses, and the
//! digest of a JSON value's TRACE canonical form.

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes` as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    digest_hex(&Sha256::digest(bytes).into())
}

/// A SHA-256 digest as 64 lowercase hex characters.
///
/// Each byte is looked up in a 16-entry table into a string allocated once at its final size;
/// `hex::encode` goes through a `char` iterator, and the TRACE committer formats a digest for
/// every event it seals.
pub fn digest_hex(digest: &[u8; 32]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// SHA-256 of `bytes` in Relay's prefixed form: `sha256:` followed by 64 lowercase hex characters.
pub fn sha256_prefixed(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// The `sha256:` digest of a JSON value's TRACE canonical form: what `action.requested` records
/// as `parameters_hash` and `action.executed` as `result_hash`, and the digest a resolve binds
/// intended parameters by. One function, so the three can never disagree.
pub fn canonical_digest(value: &serde_json::Value) -> String {
    sha256_prefixed(crate::canonical::trace_canonical(value).as_bytes())
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

    #[test]
    fn digest_hex_is_lowercase_hex_of_every_byte() {
        let digest: [u8; 32] = std::array::from_fn(|i| (i * 37 + 5) as u8);
        assert_eq!(digest_hex(&digest), hex::encode(digest));
        assert_eq!(digest_hex(&[0xff; 32]), "f".repeat(64));
        assert_eq!(digest_hex(&[0; 32]), "0".repeat(64));
    }
}

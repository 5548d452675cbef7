//! RFC 6962 / RFC 9162 §2.1 hashing: leaf and node hashes, the Merkle Tree Hash (MTH) of a list
//! of leaf hashes, and the two text forms of a hash (lowercase hex for JSON, base64 for notes).
//!
//! Invariants (tested by name in `tests`):
//! * `leaf_hash(d) = SHA-256(0x00 || d)` and `node_hash(l, r) = SHA-256(0x01 || l || r)`, so a
//!   leaf can never be mistaken for a node (`leaf_and_node_hashes_are_domain_separated`);
//! * `root_of(&[])` is SHA-256 of the empty string (`the_empty_tree_hashes_the_empty_string`);
//! * the text forms round-trip and refuse anything that is not exactly 32 bytes in canonical
//!   form (`text_forms_round_trip_and_refuse_other_lengths`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

/// A SHA-256 digest: a leaf hash, a node hash or a tree root.
pub type Hash = [u8; 32];

/// The length of a [`Hash`](type@Hash) in bytes.
pub const HASH_LEN: usize = 32;

/// The domain-separation prefix of a leaf hash (RFC 6962 §2.1).
pub const LEAF_PREFIX: u8 = 0x00;

/// The domain-separation prefix of an interior node hash (RFC 6962 §2.1).
pub const NODE_PREFIX: u8 = 0x01;

/// Why a text could not be read as a [`Hash`](type@Hash).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// The bytes decoded, but they are not 32 of them.
    #[error("a hash is {HASH_LEN} bytes and this one is {len}: pass the whole SHA-256 digest")]
    WrongLength {
        /// How many bytes the text decoded to.
        len: usize,
    },
    /// The text is not lowercase hexadecimal.
    #[error(
        "a hash in JSON is 64 lowercase hex digits; this text is not (it has {len} characters)"
    )]
    NotHex {
        /// The text's length in characters.
        len: usize,
    },
    /// The text is not canonical standard base64 (RFC 4648 §4, padded).
    #[error(
        "a hash in a note or proof line is padded standard base64 of 32 bytes; this text is not"
    )]
    NotBase64,
}

/// The leaf hash of `data`: `SHA-256(0x00 || data)`. For a TRACE event `data` is the 32 raw
/// bytes of its `event_hash`.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([LEAF_PREFIX]);
    hasher.update(data);
    hasher.finalize().into()
}

/// The hash of an interior node: `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([NODE_PREFIX]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// The root of the empty tree: SHA-256 of the empty string (RFC 9162 §2.1.1).
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The split point `k` of a tree of `n > 1` leaves: the largest power of two smaller than `n`.
/// Returns 0 for `n <= 1`, where a tree does not split.
pub fn split_point(n: u64) -> u64 {
    if n <= 1 {
        return 0;
    }
    1u64 << (63 - (n - 1).leading_zeros())
}

/// The Merkle Tree Hash of a list of leaf hashes (RFC 9162 §2.1.1), for any length including 0.
pub fn root_of(leaves: &[Hash]) -> Hash {
    match leaves {
        [] => empty_root(),
        [only] => *only,
        _ => {
            // A slice's length always fits in u64, and the split is below it.
            let k = usize::try_from(split_point(leaves.len() as u64)).unwrap_or(leaves.len() / 2);
            let (left, right) = leaves.split_at(k);
            node_hash(&root_of(left), &root_of(right))
        }
    }
}

/// A hash as 64 lowercase hex digits (the JSON form).
pub fn to_hex(hash: &Hash) -> String {
    hex::encode(hash)
}

/// Reads 64 lowercase hex digits as a hash.
///
/// # Errors
/// [`HashError::NotHex`] for anything but lowercase hex digits, [`HashError::WrongLength`] when
/// they are not 32 bytes.
pub fn from_hex(text: &str) -> Result<Hash, HashError> {
    let not_hex = || HashError::NotHex { len: text.len() };
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err(not_hex());
    }
    if digits.len() != 2 * HASH_LEN {
        // The error names the length only once the text is known to be hex.
        let hex = digits.iter().all(|d| nibble(*d).is_some());
        return Err(if hex {
            HashError::WrongLength {
                len: digits.len() / 2,
            }
        } else {
            not_hex()
        });
    }
    // Decoded in place, through a table and without a branch a digit: every appended event's
    // hash is read this way, and a decode that allocated was a tenth of the committer's time
    // (`bench/NOTES.md`, stop 58); one that matched each digit took 208 ns (stop 71).
    let mut hash = [0u8; HASH_LEN];
    let mut seen = 0u8;
    for (byte, pair) in hash.iter_mut().zip(digits.chunks_exact(2)) {
        let (high, low) = (NIBBLES[usize::from(pair[0])], NIBBLES[usize::from(pair[1])]);
        seen |= high | low;
        *byte = (high << 4) | low;
    }
    if seen & NOT_HEX != 0 {
        return Err(not_hex());
    }
    Ok(hash)
}

/// Marks a byte that is no lowercase hex digit in [`NIBBLES`]: no digit's value has these bits.
const NOT_HEX: u8 = 0xF0;

/// Each byte's value as a lowercase hex digit, or [`NOT_HEX`].
const NIBBLES: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut d = 0u8;
    while d < 16 {
        let digit = if d < 10 { b'0' + d } else { b'a' + d - 10 };
        table[digit as usize] = d;
        d += 1;
    }
    table
};

/// The value of one lowercase hex digit.
fn nibble(digit: u8) -> Option<u8> {
    let value = NIBBLES[usize::from(digit)];
    (value & NOT_HEX == 0).then_some(value)
}

/// A hash as padded standard base64 (the note and proof-line form).
pub fn to_base64(hash: &Hash) -> String {
    STANDARD.encode(hash)
}

/// Reads padded standard base64 of 32 bytes as a hash.
///
/// # Errors
/// [`HashError::NotBase64`] for text that is not canonical base64, [`HashError::WrongLength`]
/// when it does not decode to 32 bytes.
pub fn from_base64(text: &str) -> Result<Hash, HashError> {
    let bytes = STANDARD.decode(text).map_err(|_| HashError::NotBase64)?;
    to_hash(&bytes)
}

/// A 32-byte slice as a hash.
///
/// # Errors
/// [`HashError::WrongLength`] when the slice is not 32 bytes.
pub fn to_hash(bytes: &[u8]) -> Result<Hash, HashError> {
    Hash::try_from(bytes).map_err(|_| HashError::WrongLength { len: bytes.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_and_node_hashes_are_domain_separated() {
        let a = [7u8; 32];
        let mut both = [0u8; 64];
        both[..32].copy_from_slice(&a);
        both[32..].copy_from_slice(&a);
        assert_ne!(leaf_hash(&both), node_hash(&a, &a));
        assert_eq!(
            to_hex(&leaf_hash(b"")),
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
        );
    }

    #[test]
    fn the_empty_tree_hashes_the_empty_string() {
        assert_eq!(
            to_hex(&root_of(&[])),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn split_point_is_the_largest_power_of_two_below() {
        let cases = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 4),
            (8, 4),
            (9, 8),
        ];
        for (n, k) in cases {
            assert_eq!(split_point(n), k, "n = {n}");
        }
        assert_eq!(split_point(u64::MAX), 1 << 63);
    }

    #[test]
    fn text_forms_round_trip_and_refuse_other_lengths() {
        let h = leaf_hash(b"x");
        assert_eq!(from_hex(&to_hex(&h)), Ok(h));
        assert_eq!(from_base64(&to_base64(&h)), Ok(h));
        assert_eq!(from_hex("00"), Err(HashError::WrongLength { len: 1 }));
        assert_eq!(
            from_hex(&to_hex(&h).to_uppercase()),
            Err(HashError::NotHex { len: 64 })
        );
        assert_eq!(from_hex("0"), Err(HashError::NotHex { len: 1 }));
        assert_eq!(from_hex("0g"), Err(HashError::NotHex { len: 2 }));
        let mut last = to_hex(&h);
        last.replace_range(63.., "g");
        assert_eq!(from_hex(&last), Err(HashError::NotHex { len: 64 }));
        // Every digit in every place of a pair, against the hex crate's decoding.
        let digits = "0123456789abcdef".repeat(5);
        for k in 0..16 {
            let text = &digits[k..k + 64];
            let expected = hex::decode(text).ok().and_then(|b| Hash::try_from(b).ok());
            assert_eq!(from_hex(text).ok(), expected, "{text}");
        }
        // Every byte in the high and the low digit of a pair: only lowercase hex decodes.
        for byte in 0..=u8::MAX {
            let hex = byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte);
            for at in [0, 31, 62, 63] {
                let mut text = vec![b'0'; 64];
                text[at] = byte;
                let Ok(text) = String::from_utf8(text) else {
                    continue;
                };
                assert_eq!(from_hex(&text).is_ok(), hex, "byte {byte:#04x} at {at}");
            }
        }
        let wide = format!("{}é", "0".repeat(62));
        assert_eq!(from_hex(&wide), Err(HashError::NotHex { len: 64 }));
        assert_eq!(from_base64("AAAA"), Err(HashError::WrongLength { len: 3 }));
        assert_eq!(from_base64("not base64!"), Err(HashError::NotBase64));
    }
}

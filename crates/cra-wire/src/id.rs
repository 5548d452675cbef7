//! Identifiers: UUIDv7 generation behind an injectable [`IdGenerator`] (so replays and fixtures
//! are reproducible) and validation of the canonical textual form.
//!
//! cra *emits* UUIDv7. On input it accepts any canonical 8-4-4-4-12 lowercase-hex UUID, because
//! the spec's own examples are not version 7.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

/// A source of new identifiers.
pub trait IdGenerator: Send + Sync + fmt::Debug {
    /// A fresh UUID (version 7 for every generator cra ships).
    fn new_uuid(&self) -> Uuid;

    /// A fresh UUID in canonical lowercase text form.
    fn new_id(&self) -> String {
        self.new_uuid().hyphenated().to_string()
    }
}

/// Time-ordered random UUIDv7 from the system clock and the operating system's randomness.
#[derive(Debug, Default, Clone, Copy)]
pub struct UuidV7Ids;

impl IdGenerator for UuidV7Ids {
    fn new_uuid(&self) -> Uuid {
        Uuid::now_v7()
    }
}

/// Deterministic UUIDv7s: a fixed millisecond timestamp, then a counter in the random bits.
/// Two generators with the same seed produce the same sequence.
#[derive(Debug)]
pub struct SequentialIds {
    unix_ms: u64,
    seed: u64,
    counter: AtomicU64,
}

impl SequentialIds {
    /// A generator whose ids carry `unix_ms` as their timestamp and `seed` in their high random bits.
    pub fn new(unix_ms: u64, seed: u64) -> Self {
        Self {
            unix_ms,
            seed,
            counter: AtomicU64::new(0),
        }
    }
}

impl IdGenerator for SequentialIds {
    fn new_uuid(&self) -> Uuid {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let ms = self.unix_ms & 0xFFFF_FFFF_FFFF;
        // 48 bits time | 4 bits version (7) | 12 bits seed | 2 bits variant | 62 bits counter
        let hi = (ms << 16) | 0x7000 | (self.seed & 0x0FFF);
        let lo = 0x8000_0000_0000_0000 | (n & 0x3FFF_FFFF_FFFF_FFFF);
        Uuid::from_u64_pair(hi, lo)
    }
}

/// True when `s` is a UUID in canonical form: 36 characters, lowercase hex, hyphens at 8-4-4-4-12.
pub fn is_canonical_uuid(s: &str) -> bool {
    is_canonical_uuid_bytes(s.as_bytes())
}

/// [`is_canonical_uuid`] of bytes as written (a verifier reads fields without decoding them).
pub fn is_canonical_uuid_bytes(b: &[u8]) -> bool {
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        })
}

/// True when `s` is a canonical UUID of version 7 with the RFC 9562 variant.
pub fn is_uuid_v7(s: &str) -> bool {
    is_canonical_uuid(s)
        && Uuid::parse_str(s)
            .map(|u| u.get_version_num() == 7 && u.get_variant() == uuid::Variant::RFC4122)
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_canonical_v7() {
        for g in [
            &UuidV7Ids as &dyn IdGenerator,
            &SequentialIds::new(1_735_387_200_000, 7),
        ] {
            let id = g.new_id();
            assert!(is_uuid_v7(&id), "{id}");
        }
    }

    #[test]
    fn sequential_ids_repeat_for_the_same_seed() {
        let a = SequentialIds::new(1, 2);
        let b = SequentialIds::new(1, 2);
        assert_eq!(a.new_id(), b.new_id());
        assert_ne!(a.new_id(), SequentialIds::new(1, 3).new_id());
    }

    #[test]
    fn canonical_form_is_checked() {
        assert!(is_canonical_uuid("01234567-89ab-cdef-0123-456789abcdef"));
        assert!(!is_uuid_v7("01234567-89ab-cdef-0123-456789abcdef"));
        assert!(!is_canonical_uuid("01234567-89AB-cdef-0123-456789abcdef"));
        assert!(!is_canonical_uuid("0123456789abcdef0123456789abcdef"));
    }
}

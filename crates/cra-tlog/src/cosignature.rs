//! C2SP `tlog-cosignature` (c2sp.org/tlog-cosignature), the Ed25519 `cosignature/v1` type: a
//! witness's timestamped statement that a checkpoint is the largest consistent tree it has seen
//! of its log.
//!
//! A cosignature is a note signature line `— <cosigner name> base64(key ID || timestamp ||
//! signature)`: the key ID is `SHA-256(name || 0x0A || 0x04 || public key)[:4]`, the timestamp
//! 8 bytes big-endian (POSIX seconds), the signature Ed25519 over
//!
//! ```text
//! cosignature/v1
//! time <timestamp, decimal>
//! <the whole checkpoint body, extension lines included>
//! ```
//!
//! The time is handed in: this crate reads no clock.
//!
//! # Invariants (tested by name)
//! * what a signer signs its verifier accepts, with the timestamp it was given, and the line
//!   has the spec's layout (`cosignatures_round_trip_with_their_timestamp`);
//! * a changed body, timestamp, key ID, name or signature byte fails
//!   (`any_change_fails_verification`);
//! * key strings round-trip, use type `0x04`, and refuse a note (`0x01`) key
//!   (`key_strings_use_type_four`);
//! * timestamps are `1..=2^63 - 1`: zero and larger values are refused on both sides
//!   (`timestamps_are_positive_and_fit_63_bits`).

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use crate::note::{
    self, Note, PRIVATE_KEY_PREFIX, Signature, check_key_name, key_material, key_string, split_key,
};

/// The key type byte of Ed25519 `cosignature/v1` keys in key IDs and key strings.
pub const COSIGNATURE_V1_TYPE: u8 = 0x04;

/// The header line of the signed message, with its newline.
pub const HEADER: &str = "cosignature/v1\n";

/// The largest timestamp the spec allows: 2^63 - 1.
pub const MAX_TIMESTAMP: u64 = i64::MAX as u64;

/// The length of a cosignature's bytes after the key ID: 8-byte timestamp, 64-byte signature.
pub const COSIGNATURE_LEN: usize = 8 + 64;

/// Why a cosigner key, a signing or a verification failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CosignatureError {
    /// A key name is empty or has a space or `+`.
    #[error(
        "cosigner name {name:?} is empty or has a space or `+`; use a schema-less URL such as witness.example/w1"
    )]
    BadName {
        /// The name.
        name: String,
    },
    /// A key string is malformed.
    #[error("cosigner {what} key string is malformed: {why}")]
    BadKey {
        /// "verifier" or "signer".
        what: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// A timestamp of zero or above 2^63 - 1.
    #[error(
        "cosignature timestamp {timestamp} is out of range: it is POSIX seconds from 1 to 2^63 - 1 (zero would omit the time)"
    )]
    BadTimestamp {
        /// The timestamp.
        timestamp: u64,
    },
    /// The signature line is by another key (name or key ID).
    #[error(
        "the signature is by {name}+{key_id:08x}, not by this cosigner; pick the line by name and key ID first"
    )]
    OtherKey {
        /// The line's key name.
        name: String,
        /// The line's key ID.
        key_id: u32,
    },
    /// The signature bytes are not 8 + 64 long.
    #[error(
        "a cosignature/v1 is 72 bytes after the key ID (timestamp and signature); this one is {len}"
    )]
    WrongLength {
        /// Its length.
        len: usize,
    },
    /// Ed25519 verification failed.
    #[error(
        "the cosignature by {name} does not verify: the checkpoint or timestamp was altered, or another key signed"
    )]
    BadSignature {
        /// The cosigner's name.
        name: String,
    },
    /// The note carries no line by this cosigner.
    #[error("the note has no cosignature by {name}+{key_id:08x}")]
    Missing {
        /// The cosigner's name.
        name: String,
        /// Its key ID.
        key_id: u32,
    },
}

/// The message a `cosignature/v1` signs: header, time line, then the checkpoint body (a note's
/// text, with its final newline).
pub fn signed_message(body: &str, timestamp: u64) -> Vec<u8> {
    let mut message = Vec::with_capacity(HEADER.len() + 26 + body.len());
    message.extend_from_slice(HEADER.as_bytes());
    message.extend_from_slice(format!("time {timestamp}\n").as_bytes());
    message.extend_from_slice(body.as_bytes());
    message
}

fn check_timestamp(timestamp: u64) -> Result<(), CosignatureError> {
    if timestamp == 0 || timestamp > MAX_TIMESTAMP {
        return Err(CosignatureError::BadTimestamp { timestamp });
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), CosignatureError> {
    check_key_name(name).map_err(|_| CosignatureError::BadName {
        name: name.to_owned(),
    })
}

/// A cosigner: a name and an Ed25519 seed. Its `Debug` form never shows the seed.
pub struct CosignatureSigner {
    name: String,
    key_id: u32,
    key: SigningKey,
}

impl std::fmt::Debug for CosignatureSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CosignatureSigner({}+{:08x})", self.name, self.key_id)
    }
}

impl CosignatureSigner {
    /// The cosigner `name` with this 32-byte seed (the caller brings the randomness).
    ///
    /// # Errors
    /// [`CosignatureError::BadName`].
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, CosignatureError> {
        check_name(name)?;
        let key = SigningKey::from_bytes(seed);
        let key_id = note::key_id(name, COSIGNATURE_V1_TYPE, key.verifying_key().as_bytes());
        Ok(Self {
            name: name.to_owned(),
            key_id,
            key,
        })
    }

    /// Reads a signer key string `PRIVATE+KEY+<name>+<hex key ID>+<base64(0x04 || seed)>`. The
    /// key ID must be the one the name and key give.
    ///
    /// # Errors
    /// [`CosignatureError::BadKey`] or [`CosignatureError::BadName`].
    pub fn parse(skey: &str) -> Result<Self, CosignatureError> {
        let bad = |why| CosignatureError::BadKey {
            what: "signer",
            why,
        };
        let rest = skey
            .trim_end_matches('\n')
            .strip_prefix(PRIVATE_KEY_PREFIX)
            .ok_or(bad("no PRIVATE+KEY+ prefix"))?;
        let (name, id, material) = split_key(rest).ok_or(bad("not name+id+key"))?;
        let seed = key_material(material, COSIGNATURE_V1_TYPE).ok_or(bad(
            "not base64 of 0x04 and a 32-byte seed (a note signing key has 0x01: make a cosigner key)",
        ))?;
        let signer = Self::from_seed(name, &seed)?;
        if id != signer.key_id {
            return Err(bad("the key ID is not the one the name and key give"));
        }
        Ok(signer)
    }

    /// The signer key string (secret: store it as one).
    pub fn to_key_string(&self) -> String {
        key_string(
            PRIVATE_KEY_PREFIX,
            &self.name,
            self.key_id,
            COSIGNATURE_V1_TYPE,
            self.key.as_bytes(),
        )
    }

    /// The cosigner's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID (type `0x04`).
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The matching verifier.
    pub fn verifier(&self) -> CosignatureVerifier {
        CosignatureVerifier {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// Cosigns a checkpoint body (a note's text) at `timestamp` (POSIX seconds).
    ///
    /// # Errors
    /// [`CosignatureError::BadTimestamp`] for 0 or a value above 2^63 - 1.
    pub fn sign(&self, body: &str, timestamp: u64) -> Result<Signature, CosignatureError> {
        check_timestamp(timestamp)?;
        let signature = self.key.sign(&signed_message(body, timestamp));
        let mut bytes = Vec::with_capacity(COSIGNATURE_LEN);
        bytes.extend_from_slice(&timestamp.to_be_bytes());
        bytes.extend_from_slice(&signature.to_bytes());
        Signature::new(&self.name, self.key_id, bytes).map_err(|_| CosignatureError::BadName {
            name: self.name.clone(),
        })
    }
}

/// A cosigner's public key, as clients configure it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CosignatureVerifier {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl CosignatureVerifier {
    /// The verifier of cosigner `name` with this RFC 8032 public key.
    ///
    /// # Errors
    /// [`CosignatureError::BadName`], or [`CosignatureError::BadKey`] for bytes that are not a
    /// point.
    pub fn from_public_key(name: &str, public_key: &[u8; 32]) -> Result<Self, CosignatureError> {
        check_name(name)?;
        let key = VerifyingKey::from_bytes(public_key).map_err(|_| CosignatureError::BadKey {
            what: "verifier",
            why: "the public key is not an Ed25519 point",
        })?;
        Ok(Self {
            name: name.to_owned(),
            key_id: note::key_id(name, COSIGNATURE_V1_TYPE, public_key),
            key,
        })
    }

    /// Reads a verifier key string `<name>+<hex key ID>+<base64(0x04 || public key)>` (a
    /// signed-note vkey of type `0x04`). The key ID must be the one the name and key give.
    ///
    /// # Errors
    /// [`CosignatureError::BadKey`] or [`CosignatureError::BadName`].
    pub fn parse(vkey: &str) -> Result<Self, CosignatureError> {
        let bad = |why| CosignatureError::BadKey {
            what: "verifier",
            why,
        };
        let (name, id, material) = split_key(vkey).ok_or(bad("not name+id+key"))?;
        let key = key_material(material, COSIGNATURE_V1_TYPE)
            .ok_or(bad("not base64 of 0x04 and a 32-byte key"))?;
        let verifier = Self::from_public_key(name, &key)?;
        if id != verifier.key_id {
            return Err(bad("the key ID is not the one the name and key give"));
        }
        Ok(verifier)
    }

    /// The verifier key string.
    pub fn to_key_string(&self) -> String {
        key_string(
            "",
            &self.name,
            self.key_id,
            COSIGNATURE_V1_TYPE,
            self.key.as_bytes(),
        )
    }

    /// The cosigner's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID (type `0x04`).
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// Verifies `signature`, a line by this cosigner, over the checkpoint `body`; returns its
    /// timestamp.
    ///
    /// # Errors
    /// [`CosignatureError::OtherKey`], [`CosignatureError::WrongLength`],
    /// [`CosignatureError::BadTimestamp`] or [`CosignatureError::BadSignature`].
    pub fn verify(&self, body: &str, signature: &Signature) -> Result<u64, CosignatureError> {
        if signature.name() != self.name || signature.key_id() != self.key_id {
            return Err(CosignatureError::OtherKey {
                name: signature.name().to_owned(),
                key_id: signature.key_id(),
            });
        }
        let bytes = signature.signature();
        let (Some(time), Some(sig)) = (bytes.get(..8), bytes.get(8..)) else {
            return Err(CosignatureError::WrongLength { len: bytes.len() });
        };
        if bytes.len() != COSIGNATURE_LEN {
            return Err(CosignatureError::WrongLength { len: bytes.len() });
        }
        let mut be = [0u8; 8];
        be.copy_from_slice(time);
        let timestamp = u64::from_be_bytes(be);
        check_timestamp(timestamp)?;
        let bad = || CosignatureError::BadSignature {
            name: self.name.clone(),
        };
        let sig = ed25519_dalek::Signature::from_slice(sig).map_err(|_| bad())?;
        self.key
            .verify_strict(&signed_message(body, timestamp), &sig)
            .map_err(|_| bad())?;
        Ok(timestamp)
    }

    /// Finds this cosigner's line in a note and verifies it over the note's text; returns its
    /// timestamp. Lines by other keys are ignored, as the spec asks of clients.
    ///
    /// # Errors
    /// [`CosignatureError::Missing`], or those of [`CosignatureVerifier::verify`].
    pub fn verify_note(&self, note: &Note) -> Result<u64, CosignatureError> {
        let line = note
            .signatures()
            .iter()
            .find(|s| s.name() == self.name && s.key_id() == self.key_id)
            .ok_or_else(|| CosignatureError::Missing {
                name: self.name.clone(),
                key_id: self.key_id,
            })?;
        self.verify(note.text(), line)
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    const BODY: &str =
        "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";

    fn cosigner(seed: u8) -> CosignatureSigner {
        CosignatureSigner::from_seed("witness.example/w1", &[seed; 32])
            .unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn cosignatures_round_trip_with_their_timestamp() {
        let w = cosigner(1);
        let sig = w.sign(BODY, 1_679_315_147);
        assert_eq!(
            sig.as_ref()
                .map_err(Clone::clone)
                .and_then(|s| w.verifier().verify(BODY, s)),
            Ok(1_679_315_147)
        );
        let Ok(sig) = sig else { unreachable!() };
        assert_eq!(sig.signature().len(), COSIGNATURE_LEN);
        assert_eq!(
            sig.signature().get(..8),
            Some(&1_679_315_147u64.to_be_bytes()[..])
        );
        // the message is the spec's example
        assert_eq!(
            signed_message(BODY, 1_679_315_147),
            format!("cosignature/v1\ntime 1679315147\n{BODY}").into_bytes()
        );
        // in a note, beside the log's signature
        let mut note = Note::new(BODY).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(note.add_signature(sig), Ok(()));
        let again = Note::parse(note.to_text().as_bytes()).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(w.verifier().verify_note(&again), Ok(1_679_315_147));
        assert_eq!(
            cosigner(2).verifier().verify_note(&again),
            Err(CosignatureError::Missing {
                name: "witness.example/w1".into(),
                key_id: cosigner(2).key_id()
            })
        );
    }

    #[test]
    fn the_spec_example_line_has_the_spec_layout() {
        // c2sp.org/tlog-cosignature's example line: key ID, then the timestamp of its example
        // message, then 64 bytes (its key is not published, so only the layout is checked).
        let encoded = "jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==";
        let bytes = STANDARD.decode(encoded).unwrap_or_default();
        assert_eq!(bytes.len(), 4 + COSIGNATURE_LEN);
        let mut be = [0u8; 8];
        be.copy_from_slice(bytes.get(4..12).unwrap_or(&[0; 8]));
        assert_eq!(u64::from_be_bytes(be), 1_679_315_147);
    }

    #[test]
    fn any_change_fails_verification() {
        let w = cosigner(3);
        let v = w.verifier();
        let Ok(sig) = w.sign(BODY, 1_700_000_000) else {
            unreachable!()
        };
        assert!(
            v.verify(&BODY.replace("20852163", "20852164"), &sig)
                .is_err()
        );
        assert!(v.verify(&format!("{BODY}ext\n"), &sig).is_err());
        for i in 0..sig.signature().len() {
            let mut bytes = sig.signature().to_vec();
            if let Some(b) = bytes.get_mut(i) {
                *b ^= 0x01;
            }
            let changed = Signature::new(sig.name(), sig.key_id(), bytes)
                .unwrap_or_else(|e| unreachable!("{e}"));
            assert!(v.verify(BODY, &changed).is_err(), "byte {i}");
        }
        let other_id = Signature::new(sig.name(), sig.key_id() ^ 1, sig.signature().to_vec())
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert!(matches!(
            v.verify(BODY, &other_id),
            Err(CosignatureError::OtherKey { .. })
        ));
        let short = Signature::new(sig.name(), sig.key_id(), vec![1; 71])
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(
            v.verify(BODY, &short),
            Err(CosignatureError::WrongLength { len: 71 })
        );
        // another key under the same name has another key ID
        assert_ne!(cosigner(4).key_id(), w.key_id());
    }

    #[test]
    fn key_strings_use_type_four() {
        let w = cosigner(5);
        let vkey = w.verifier().to_key_string();
        assert_eq!(
            CosignatureVerifier::parse(&vkey).map(|v| v.to_key_string()),
            Ok(vkey.clone())
        );
        let material = vkey.rsplit('+').next().unwrap_or_default();
        assert_eq!(
            STANDARD.decode(material).unwrap_or_default().first(),
            Some(&0x04)
        );
        assert_eq!(
            CosignatureSigner::parse(&w.to_key_string()).map(|s| s.to_key_string()),
            Ok(w.to_key_string())
        );
        assert_eq!(
            CosignatureSigner::parse(&format!("{}\n", w.to_key_string())).map(|s| s.key_id()),
            Ok(w.key_id())
        );
        // a note key (type 0x01) is not a cosigner key, either way
        let note_signer = note::Ed25519Signer::from_seed("witness.example/w1", &[5; 32])
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert!(matches!(
            CosignatureVerifier::parse(&note_signer.verifier().to_key_string()),
            Err(CosignatureError::BadKey { .. })
        ));
        assert!(matches!(
            CosignatureSigner::parse(&note_signer.to_key_string()),
            Err(CosignatureError::BadKey { .. })
        ));
        assert!(matches!(
            note::Ed25519Verifier::parse(&vkey),
            Err(note::NoteError::BadKey { .. })
        ));
        // the same public key, another type byte: another key ID
        assert_ne!(note_signer.key_id(), w.key_id());
        let wrong_id = vkey.replacen(&format!("{:08x}", w.key_id()), "00000000", 1);
        assert!(CosignatureVerifier::parse(&wrong_id).is_err());
        assert!(CosignatureSigner::from_seed("a b", &[0; 32]).is_err());
    }

    #[test]
    fn timestamps_are_positive_and_fit_63_bits() {
        let w = cosigner(6);
        for bad in [0, MAX_TIMESTAMP + 1, u64::MAX] {
            assert_eq!(
                w.sign(BODY, bad).map(|_| ()),
                Err(CosignatureError::BadTimestamp { timestamp: bad })
            );
        }
        let Ok(max) = w.sign(BODY, MAX_TIMESTAMP) else {
            unreachable!()
        };
        assert_eq!(w.verifier().verify(BODY, &max), Ok(MAX_TIMESTAMP));
        // a zero timestamp is refused by the verifier too, whatever the signature
        let mut zero = max.signature().to_vec();
        if let Some(t) = zero.get_mut(..8) {
            t.copy_from_slice(&[0; 8]);
        }
        let zero =
            Signature::new(max.name(), max.key_id(), zero).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(
            w.verifier().verify(BODY, &zero),
            Err(CosignatureError::BadTimestamp { timestamp: 0 })
        );
    }
}

//! C2SP `signed-note` (c2sp.org/signed-note): notes, Ed25519 signers and verifiers, and their
//! key strings.
//!
//! A note is a text ending in a newline, a blank line, and one or more signature lines
//! `— <key name> <base64(key ID || signature)>` (em dash U+2014, space). Only Ed25519
//! (signature type `0x01`) is implemented; `specs/tlog.md` says why.
//!
//! # Invariants (tested by name)
//! * formatting a parsed note gives the same bytes (`a_note_round_trips_byte_for_byte`);
//! * unknown keys are ignored, a known key's bad signature rejects the whole note, and a note
//!   needs one known valid signature (`verification_follows_the_spec`);
//! * limits: valid UTF-8 without control characters but newline, at most
//!   [`MAX_SIGNATURES`] signatures and [`MAX_NOTE_SIZE`] bytes, key names non-empty without
//!   spaces or `+` (`malformed_notes_are_refused_with_the_reason`);
//! * key strings round-trip and are the ones Go's `sumdb/note` uses
//!   (`key_strings_round_trip_and_match_the_spec_example`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

/// The most signatures a note may carry (the spec asks verifiers to accept at least 16).
pub const MAX_SIGNATURES: usize = 100;

/// The largest note accepted, in bytes.
pub const MAX_NOTE_SIZE: usize = 1_000_000;

/// The signature type identifier of Ed25519 in signed notes.
pub const ED25519_TYPE: u8 = 0x01;

/// The prefix of a signature line: em dash U+2014 and a space.
pub const SIGNATURE_PREFIX: &str = "\u{2014} ";

/// The prefix of a signer (private) key string, as in Go's `sumdb/note`.
pub(crate) const PRIVATE_KEY_PREFIX: &str = "PRIVATE+KEY+";

/// Why a note, a key string or a verification failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// The note is larger than [`MAX_NOTE_SIZE`].
    #[error("the note is {size} bytes; notes over {MAX_NOTE_SIZE} bytes are refused")]
    TooLarge {
        /// Its size.
        size: usize,
    },
    /// The note is not UTF-8.
    #[error("a signed note is UTF-8 text and this one is not")]
    NotUtf8,
    /// A control character other than newline.
    #[error("a signed note has no control characters but newline; one is at byte {offset}")]
    ControlCharacter {
        /// Its byte offset.
        offset: usize,
    },
    /// The text does not end in a newline (or is empty).
    #[error("a note's text is non-empty and ends with a newline")]
    TextWithoutNewline,
    /// No blank line separates the text from signatures, or no signature follows it.
    #[error(
        "a signed note is its text, a blank line, then one or more signature lines each ending in a newline; this one is not"
    )]
    NoSignatures,
    /// A signature line is malformed.
    #[error("signature line {line} is not `\u{2014} <key name> <base64(key ID || signature)>`")]
    MalformedSignature {
        /// Its 1-based position among the signature lines.
        line: usize,
    },
    /// More than [`MAX_SIGNATURES`] signatures.
    #[error("the note has {count} signatures; at most {MAX_SIGNATURES} are accepted")]
    TooManySignatures {
        /// How many it has.
        count: usize,
    },
    /// A key name is empty or has a space or `+`.
    #[error(
        "key name {name:?} is empty or has a space or `+`; use a schema-less URL such as example.com/log"
    )]
    BadKeyName {
        /// The name.
        name: String,
    },
    /// A key string is malformed.
    #[error("{what} key string is malformed: {why}")]
    BadKey {
        /// "verifier" or "signer".
        what: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// Two verifiers share a key name and ID.
    #[error(
        "two verifiers are named {name} with key ID {key_id:08x}; a note could not say which signed"
    )]
    AmbiguousVerifiers {
        /// The shared name.
        name: String,
        /// The shared key ID.
        key_id: u32,
    },
    /// A known key's signature does not verify.
    #[error(
        "the signature by known key {name}+{key_id:08x} does not verify: the note was altered or signed by another key"
    )]
    BadSignature {
        /// The key's name.
        name: String,
        /// The key's ID.
        key_id: u32,
    },
    /// No signature by a known key.
    #[error("no signature on the note is by a known key; configure the signer's verifier key")]
    NoKnownSignature,
}

/// Checks a key name: non-empty, no Unicode spaces, no `+`.
///
/// # Errors
/// [`NoteError::BadKeyName`].
pub fn check_key_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '+') {
        return Err(NoteError::BadKeyName {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// The key ID of a key: `SHA-256(name || 0x0A || type || public key)[:4]` as a big-endian u32.
pub fn key_id(name: &str, sig_type: u8, public_key: &[u8]) -> u32 {
    let digest = Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update([b'\n', sig_type])
        .chain_update(public_key)
        .finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// One signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    name: String,
    key_id: u32,
    signature: Vec<u8>,
}

impl Signature {
    /// A signature by the key `name`, `key_id`.
    ///
    /// # Errors
    /// [`NoteError::BadKeyName`].
    pub fn new(name: &str, key_id: u32, signature: Vec<u8>) -> Result<Self, NoteError> {
        check_key_name(name)?;
        Ok(Self {
            name: name.to_owned(),
            key_id,
            signature,
        })
    }

    /// The signing key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The signing key's ID.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The signature bytes (without the key ID).
    pub fn signature(&self) -> &[u8] {
        &self.signature
    }

    /// The line, with its newline.
    pub fn to_line(&self) -> String {
        let mut bytes = self.key_id.to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.signature);
        format!(
            "{SIGNATURE_PREFIX}{} {}\n",
            self.name,
            STANDARD.encode(bytes)
        )
    }

    /// Reads a line without its newline; `line` numbers it in errors.
    fn parse(text: &str, line: usize) -> Result<Self, NoteError> {
        let bad = NoteError::MalformedSignature { line };
        let rest = text.strip_prefix(SIGNATURE_PREFIX).ok_or(bad.clone())?;
        let (name, encoded) = rest.split_once(' ').ok_or(bad.clone())?;
        check_key_name(name).map_err(|_| bad.clone())?;
        let bytes = STANDARD.decode(encoded).map_err(|_| bad.clone())?;
        if bytes.len() < 5 {
            return Err(bad);
        }
        let key_id = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        Ok(Self {
            name: name.to_owned(),
            key_id,
            signature: bytes[4..].to_vec(),
        })
    }
}

/// A note: its text and its signatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    text: String,
    signatures: Vec<Signature>,
}

impl Note {
    /// An unsigned note of `text`, which must be non-empty, end with a newline and have no
    /// control characters but newline.
    ///
    /// # Errors
    /// [`NoteError::TextWithoutNewline`], [`NoteError::ControlCharacter`] or
    /// [`NoteError::TooLarge`].
    pub fn new(text: &str) -> Result<Self, NoteError> {
        check_size(text.len())?;
        check_characters(text)?;
        if !text.ends_with('\n') {
            return Err(NoteError::TextWithoutNewline);
        }
        Ok(Self {
            text: text.to_owned(),
            signatures: Vec::new(),
        })
    }

    /// Reads a signed note. Its signatures are not verified: see [`Note::verify`].
    ///
    /// # Errors
    /// A [`NoteError`] naming the first rule broken.
    pub fn parse(bytes: &[u8]) -> Result<Self, NoteError> {
        check_size(bytes.len())?;
        let all = std::str::from_utf8(bytes).map_err(|_| NoteError::NotUtf8)?;
        check_characters(all)?;
        if !all.ends_with('\n') {
            return Err(NoteError::NoSignatures);
        }
        let split = all.rfind("\n\n").ok_or(NoteError::NoSignatures)?;
        let (text, lines) = (&all[..=split], &all[split + 2..]);
        let mut note = Self::new(text)?;
        let count = lines.matches('\n').count();
        if count == 0 {
            return Err(NoteError::NoSignatures);
        }
        if count > MAX_SIGNATURES {
            return Err(NoteError::TooManySignatures { count });
        }
        for (i, line) in lines.split_terminator('\n').enumerate() {
            note.signatures.push(Signature::parse(line, i + 1)?);
        }
        Ok(note)
    }

    /// The signed text, with its final newline.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The signatures, in order.
    pub fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    /// Adds a signature, replacing one by the same key (name and ID).
    ///
    /// # Errors
    /// [`NoteError::TooManySignatures`] past [`MAX_SIGNATURES`].
    pub fn add_signature(&mut self, signature: Signature) -> Result<(), NoteError> {
        self.signatures
            .retain(|s| (s.name.as_str(), s.key_id) != (signature.name.as_str(), signature.key_id));
        if self.signatures.len() >= MAX_SIGNATURES {
            return Err(NoteError::TooManySignatures {
                count: self.signatures.len() + 1,
            });
        }
        self.signatures.push(signature);
        Ok(())
    }

    /// Signs the text with `signer` (replacing its earlier signature, if any).
    ///
    /// # Errors
    /// [`NoteError::TooManySignatures`] past [`MAX_SIGNATURES`].
    pub fn sign(&mut self, signer: &Ed25519Signer) -> Result<(), NoteError> {
        let signature = signer.sign(self.text.as_bytes());
        self.add_signature(signature)
    }

    /// The note as text: its text, a blank line, its signature lines.
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(self.text.len() + 1 + 100 * self.signatures.len());
        out.push_str(&self.text);
        out.push('\n');
        for signature in &self.signatures {
            out.push_str(&signature.to_line());
        }
        out
    }

    /// Verifies the note against known keys: signatures by unknown keys (name and ID) are
    /// ignored, a known key's signature must verify, and one must. Returns the verified
    /// signatures.
    ///
    /// # Errors
    /// [`NoteError::BadSignature`] or [`NoteError::NoKnownSignature`].
    pub fn verify(&self, known: &Verifiers) -> Result<Vec<&Signature>, NoteError> {
        let mut verified: Vec<&Signature> = Vec::new();
        for signature in &self.signatures {
            let Some(verifier) = known.find(&signature.name, signature.key_id) else {
                continue;
            };
            if !verifier.verify(self.text.as_bytes(), &signature.signature) {
                return Err(NoteError::BadSignature {
                    name: signature.name.clone(),
                    key_id: signature.key_id,
                });
            }
            verified.push(signature);
        }
        if verified.is_empty() {
            return Err(NoteError::NoKnownSignature);
        }
        Ok(verified)
    }
}

fn check_size(size: usize) -> Result<(), NoteError> {
    if size > MAX_NOTE_SIZE {
        return Err(NoteError::TooLarge { size });
    }
    Ok(())
}

fn check_characters(text: &str) -> Result<(), NoteError> {
    match text.bytes().position(|b| b < 0x20 && b != b'\n') {
        Some(offset) => Err(NoteError::ControlCharacter { offset }),
        None => Ok(()),
    }
}

/// An Ed25519 note signer: a key name and a 32-byte seed (RFC 8032 private key).
///
/// Its `Debug` form shows the name and key ID, never the seed.
pub struct Ed25519Signer {
    name: String,
    key_id: u32,
    key: SigningKey,
}

impl std::fmt::Debug for Ed25519Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ed25519Signer({}+{:08x})", self.name, self.key_id)
    }
}

impl Ed25519Signer {
    /// The signer of key `name` with this seed (the caller brings the randomness).
    ///
    /// # Errors
    /// [`NoteError::BadKeyName`].
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, NoteError> {
        check_key_name(name)?;
        let key = SigningKey::from_bytes(seed);
        let key_id = key_id(name, ED25519_TYPE, key.verifying_key().as_bytes());
        Ok(Self {
            name: name.to_owned(),
            key_id,
            key,
        })
    }

    /// Reads a signer key string `PRIVATE+KEY+<name>+<hex key ID>+<base64(0x01 || seed)>` (Go's
    /// `sumdb/note` form). The key ID must be the one the key computes.
    ///
    /// # Errors
    /// [`NoteError::BadKey`] or [`NoteError::BadKeyName`].
    pub fn parse(skey: &str) -> Result<Self, NoteError> {
        let bad = |why| NoteError::BadKey {
            what: "signer",
            why,
        };
        let rest = skey
            .strip_prefix(PRIVATE_KEY_PREFIX)
            .ok_or(bad("no PRIVATE+KEY+ prefix"))?;
        let (name, id, material) = split_key(rest).ok_or(bad("not name+id+key"))?;
        let seed = key_material(material, ED25519_TYPE)
            .ok_or(bad("not base64 of 0x01 and a 32-byte seed"))?;
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
            ED25519_TYPE,
            self.key.as_bytes(),
        )
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The matching verifier.
    pub fn verifier(&self) -> Ed25519Verifier {
        Ed25519Verifier {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// Signs `message` (a note's text).
    pub fn sign(&self, message: &[u8]) -> Signature {
        let signature = self.key.sign(message).to_bytes().to_vec();
        Signature {
            name: self.name.clone(),
            key_id: self.key_id,
            signature,
        }
    }
}

/// An Ed25519 note verifier: a key name and a public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ed25519Verifier {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl Ed25519Verifier {
    /// The verifier of key `name` with this RFC 8032 public key.
    ///
    /// # Errors
    /// [`NoteError::BadKeyName`], or [`NoteError::BadKey`] for bytes that are not a point.
    pub fn from_public_key(name: &str, public_key: &[u8; 32]) -> Result<Self, NoteError> {
        check_key_name(name)?;
        let key = VerifyingKey::from_bytes(public_key).map_err(|_| NoteError::BadKey {
            what: "verifier",
            why: "the public key is not an Ed25519 point",
        })?;
        Ok(Self {
            name: name.to_owned(),
            key_id: key_id(name, ED25519_TYPE, public_key),
            key,
        })
    }

    /// Reads a verifier key string `<name>+<hex key ID>+<base64(0x01 || public key)>`. The key
    /// ID must be the one the name and key give.
    ///
    /// # Errors
    /// [`NoteError::BadKey`] or [`NoteError::BadKeyName`].
    pub fn parse(vkey: &str) -> Result<Self, NoteError> {
        let bad = |why| NoteError::BadKey {
            what: "verifier",
            why,
        };
        let (name, id, material) = split_key(vkey).ok_or(bad("not name+id+key"))?;
        let key = key_material(material, ED25519_TYPE)
            .ok_or(bad("not base64 of 0x01 and a 32-byte key"))?;
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
            ED25519_TYPE,
            self.key.as_bytes(),
        )
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// Whether `signature` is this key's Ed25519 signature of `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(signature) = ed25519_dalek::Signature::from_slice(signature) else {
            return false;
        };
        self.key.verify_strict(message, &signature).is_ok()
    }
}

/// `<prefix><name>+<hex id>+<base64(type || key)>`: the form of every key string (notes use
/// type `0x01`, cosignatures `0x04`), which [`split_key`] and [`key_material`] read back.
pub(crate) fn key_string(
    prefix: &str,
    name: &str,
    key_id: u32,
    sig_type: u8,
    key: &[u8; 32],
) -> String {
    let mut material = vec![sig_type];
    material.extend_from_slice(key);
    format!("{prefix}{name}+{key_id:08x}+{}", STANDARD.encode(material))
}

/// `name+hex8+material` with a strictly 8-lowercase-hex-digit ID.
pub(crate) fn split_key(text: &str) -> Option<(&str, u32, &str)> {
    let (name, rest) = text.split_once('+')?;
    let (id, material) = rest.split_once('+')?;
    let hex_ok = id.len() == 8
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex_ok {
        return None;
    }
    Some((name, u32::from_str_radix(id, 16).ok()?, material))
}

/// base64(`want_type` || 32 bytes) → the 32 bytes.
pub(crate) fn key_material(text: &str, want_type: u8) -> Option<[u8; 32]> {
    let bytes = STANDARD.decode(text).ok()?;
    let (&sig_type, key) = bytes.split_first()?;
    if sig_type != want_type {
        return None;
    }
    key.try_into().ok()
}

/// The keys a reader trusts, at most one per key name and ID.
#[derive(Debug, Clone, Default)]
pub struct Verifiers {
    keys: Vec<Ed25519Verifier>,
}

impl Verifiers {
    /// A set of verifiers.
    ///
    /// # Errors
    /// [`NoteError::AmbiguousVerifiers`] when two share a name and key ID.
    pub fn new(keys: Vec<Ed25519Verifier>) -> Result<Self, NoteError> {
        for (i, a) in keys.iter().enumerate() {
            if keys[..i]
                .iter()
                .any(|b| (&a.name, a.key_id) == (&b.name, b.key_id))
            {
                return Err(NoteError::AmbiguousVerifiers {
                    name: a.name.clone(),
                    key_id: a.key_id,
                });
            }
        }
        Ok(Self { keys })
    }

    /// The verifier with this name and key ID.
    pub fn find(&self, name: &str, key_id: u32) -> Option<&Ed25519Verifier> {
        self.keys
            .iter()
            .find(|k| k.name == name && k.key_id == key_id)
    }

    /// The verifiers, in order.
    pub fn keys(&self) -> &[Ed25519Verifier] {
        &self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of c2sp.org/signed-note ("Verifier keys", "Example").
    const SPEC_VKEY: &str = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k";
    const SPEC_NOTE: &str = "This is an example message.\n\n\u{2014} example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n";

    fn signer(name: &str, byte: u8) -> Ed25519Signer {
        match Ed25519Signer::from_seed(name, &[byte; 32]) {
            Ok(s) => s,
            Err(e) => unreachable!("{e}"),
        }
    }

    fn known(keys: Vec<Ed25519Verifier>) -> Verifiers {
        Verifiers::new(keys).unwrap_or_default()
    }

    #[test]
    fn key_strings_round_trip_and_match_the_spec_example() {
        let v = Ed25519Verifier::parse(SPEC_VKEY);
        assert_eq!(
            v.as_ref().map(Ed25519Verifier::to_key_string),
            Ok(SPEC_VKEY.to_owned())
        );
        let note = Note::parse(SPEC_NOTE.as_bytes());
        let known = known(v.into_iter().collect());
        assert!(
            note.as_ref().is_ok_and(|n| n.verify(&known).is_ok()),
            "{note:?}"
        );
        let s = signer("example.com/log", 3);
        let again = Ed25519Signer::parse(&s.to_key_string()).map(|s| s.to_key_string());
        assert_eq!(again, Ok(s.to_key_string()));
        assert!(format!("{s:?}").contains("example.com/log"));
        let wrong_id = SPEC_VKEY.replace("530d903a", "530d903b");
        assert!(matches!(
            Ed25519Verifier::parse(&wrong_id),
            Err(NoteError::BadKey { .. })
        ));
    }

    #[test]
    fn a_note_round_trips_byte_for_byte() {
        let parsed = Note::parse(SPEC_NOTE.as_bytes()).map(|n| n.to_text());
        assert_eq!(parsed, Ok(SPEC_NOTE.to_owned()));
    }

    #[test]
    fn verification_follows_the_spec() {
        let (a, b) = (signer("a.example/log", 1), signer("b.example/log", 2));
        let mut note = Note::new("hello\n\nworld\n").unwrap_or_else(|_| unreachable!());
        assert_eq!(note.sign(&a), Ok(()));
        assert_eq!(note.sign(&b), Ok(()));
        let parsed = Note::parse(note.to_text().as_bytes());
        assert_eq!(parsed.as_ref(), Ok(&note));
        // unknown keys are ignored; one known suffices (key rotation)
        assert_eq!(
            note.verify(&known(vec![b.verifier()])).map(|v| v.len()),
            Ok(1)
        );
        assert_eq!(
            note.verify(&known(vec![])),
            Err(NoteError::NoKnownSignature)
        );
        // same name, other key: unknown, ignored
        let other = signer("a.example/log", 9);
        assert_eq!(
            note.verify(&known(vec![other.verifier()])),
            Err(NoteError::NoKnownSignature)
        );
        // a known key with a bad signature rejects the note
        let mut forged = note.clone();
        forged.signatures[0].signature[0] ^= 1;
        let both = known(vec![a.verifier(), b.verifier()]);
        assert!(matches!(
            forged.verify(&both),
            Err(NoteError::BadSignature { .. })
        ));
        assert!(matches!(
            Verifiers::new(vec![a.verifier(), a.verifier()]),
            Err(NoteError::AmbiguousVerifiers { .. })
        ));
    }

    #[test]
    fn malformed_notes_are_refused_with_the_reason() {
        let sig = "\u{2014} a AAAAAAA=\n";
        let cases: Vec<(Vec<u8>, NoteError)> = vec![
            (b"\xff\n\n".to_vec(), NoteError::NotUtf8),
            (
                format!("a\tb\n\n{sig}").into_bytes(),
                NoteError::ControlCharacter { offset: 1 },
            ),
            (b"text\n".to_vec(), NoteError::NoSignatures),
            (b"text\n\n".to_vec(), NoteError::NoSignatures),
            (
                format!("t\n\n{}", sig.trim_end()).into_bytes(),
                NoteError::NoSignatures,
            ),
            (
                b"t\n\n- a AAAAAAA=\n".to_vec(),
                NoteError::MalformedSignature { line: 1 },
            ),
            (
                b"t\n\n\xe2\x80\x94 a AAAA\n".to_vec(),
                NoteError::MalformedSignature { line: 1 },
            ),
            (
                format!("t\n\n{sig}{sig}\n").into_bytes(),
                NoteError::NoSignatures,
            ),
            (
                format!("t\n\n{sig}x\n").into_bytes(),
                NoteError::MalformedSignature { line: 2 },
            ),
            (
                format!("t\n\n{}", sig.repeat(101)).into_bytes(),
                NoteError::TooManySignatures { count: 101 },
            ),
            (
                format!("t\n\n{}", sig.replace(" a ", " a+b ")).into_bytes(),
                NoteError::MalformedSignature { line: 1 },
            ),
            (
                vec![b'a'; MAX_NOTE_SIZE + 1],
                NoteError::TooLarge {
                    size: MAX_NOTE_SIZE + 1,
                },
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                Note::parse(&bytes),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
        assert!(Note::parse(format!("t\n\n{}", sig.repeat(100)).as_bytes()).is_ok());
        assert_eq!(Note::new("abc"), Err(NoteError::TextWithoutNewline));
        assert_eq!(Note::new(""), Err(NoteError::TextWithoutNewline));
        for name in ["", "a b", "a+b", "a\u{00a0}b"] {
            assert!(
                matches!(check_key_name(name), Err(NoteError::BadKeyName { .. })),
                "{name:?}"
            );
        }
    }
}

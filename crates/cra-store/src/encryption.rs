//! Encryption at rest: the [`Encryption`] every backend passes a stored body through, so that TRACE
//! event bodies and CARP records are never written to the database file or to PostgreSQL as
//! plaintext when the operator configured a storage key (CRA §8.3).
//!
//! The cipher is XChaCha20-Poly1305 with a random 24-byte nonce per record (no counter to keep
//! across replicas or restarts, and random nonces of that size never repeat in practice). The
//! associated data is the name of the table the record belongs to, so an encrypted value moved to
//! another table does not open. Hashes are computed over the plaintext before anything is encrypted:
//! chains, the transparency log and exports are exactly as without encryption.
//!
//! Stored forms (`specs/storage-encryption.md` states them for tools outside cra):
//!
//! * bytes (redb): `0x02`, the 4-byte key id, the nonce, then the ciphertext and its 16-byte tag.
//!   The plaintext is the record as it would be stored unencrypted, LZ4 and all (`redb::record`).
//! * text (PostgreSQL): `encrypted:<key id, 8 hex digits>:<base64 of nonce, ciphertext and tag>`,
//!   the plaintext being the JSON compressed the same way. A JSON text never starts with either
//!   `0x02` or `e`, so stored plaintext (written before encryption was turned on) still reads.
//!
//! A key id is the first 4 bytes of `SHA-256("cra storage key\n" || key)`. Each deployment
//! registers the ids of the keys that encrypted its data with a canary encrypted by each (`storage_keys`
//! table), and [`Encryption::admit`] checks them at start: a missing or wrong key is a clear error
//! then, never a failure in the middle of a request.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

use crate::BackendError;

/// Bytes of a storage key.
pub const KEY_BYTES: usize = 32;

/// The first byte of a encrypted binary record (0x01 is the LZ4 tag of `redb::record`).
const ENCRYPTED: u8 = 0x02;

/// The start of a encrypted text record.
const TEXT_PREFIX: &str = "encrypted:";

/// Bytes of nonce.
const NONCE: usize = 24;

/// What the canary of a registered key holds; only its opening matters.
const CANARY: &[u8] = b"cra storage key canary";

/// The associated data of canaries: the registry's table.
pub(crate) const REGISTRY: &str = "storage_keys";

/// The 4-byte id of a storage key, shown as 8 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u8; 4]);

impl KeyId {
    /// Parses 8 hex digits.
    pub fn parse(text: &str) -> Option<Self> {
        let mut id = [0; 4];
        hex::decode_to_slice(text, &mut id).ok()?;
        Some(Self(id))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// A storage key: 32 secret bytes and the id derived from them.
#[derive(Clone)]
pub struct StorageKey {
    id: KeyId,
    cipher: XChaCha20Poly1305,
}

impl fmt::Debug for StorageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StorageKey({}, secret redacted)", self.id)
    }
}

/// Why a storage key's text is not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a storage key is 32 bytes written as 64 hex digits or as base64 (44 characters); this text is {0}. Make one with `cra store keygen`"
)]
pub struct KeyTextError(String);

impl StorageKey {
    /// The key of these bytes.
    pub fn from_bytes(bytes: &[u8; KEY_BYTES]) -> Self {
        let digest = Sha256::new()
            .chain_update(b"cra storage key\n")
            .chain_update(bytes)
            .finalize();
        let mut id = [0; 4];
        id.copy_from_slice(&digest[..4]);
        Self {
            id: KeyId(id),
            cipher: XChaCha20Poly1305::new(bytes.into()),
        }
    }

    /// A key written as 64 hex digits or as the base64 of 32 bytes; surrounding white space (a
    /// file's final newline) is ignored.
    pub fn parse(text: &str) -> Result<Self, KeyTextError> {
        let text = text.trim();
        let mut bytes = [0; KEY_BYTES];
        if text.len() == 2 * KEY_BYTES {
            hex::decode_to_slice(text, &mut bytes)
                .map_err(|_| KeyTextError("64 characters but not all hex digits".into()))?;
            return Ok(Self::from_bytes(&bytes));
        }
        let decoded = BASE64.decode(text).map_err(|_| {
            KeyTextError(format!("{} characters, neither hex nor base64", text.len()))
        })?;
        let bytes: [u8; KEY_BYTES] = decoded
            .try_into()
            .map_err(|d: Vec<u8>| KeyTextError(format!("base64 of {} bytes", d.len())))?;
        Ok(Self::from_bytes(&bytes))
    }

    /// A new random key, as the base64 text [`StorageKey::parse`] reads.
    pub fn generate_text() -> String {
        BASE64.encode(XChaCha20Poly1305::generate_key(&mut OsRng))
    }

    /// The key's id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    fn encrypt(&self, area: &str, plain: &[u8]) -> Result<(XNonce, Vec<u8>), EncryptionError> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let payload = Payload {
            msg: plain,
            aad: area.as_bytes(),
        };
        let encrypted = self
            .cipher
            .encrypt(&nonce, payload)
            .map_err(|_| EncryptionError::TooLarge(plain.len()))?;
        Ok((nonce, encrypted))
    }

    fn decrypt(
        &self,
        area: &str,
        nonce: &[u8],
        encrypted: &[u8],
    ) -> Result<Vec<u8>, EncryptionError> {
        let payload = Payload {
            msg: encrypted,
            aad: area.as_bytes(),
        };
        self.cipher
            .decrypt(XNonce::from_slice(nonce), payload)
            .map_err(|_| EncryptionError::Damaged {
                key: self.id,
                area: area.to_owned(),
            })
    }
}

/// Why a stored record could not be encrypted or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncryptionError {
    /// The record names a key the store was not given.
    #[error(
        "a stored record is encrypted with storage key {0}, which is not configured; give that key (as [encryption] retired_key_files, or --storage-key-file) to read it"
    )]
    UnknownKey(KeyId),
    /// The record is encrypted but the store has no keys at all.
    #[error(
        "a stored record is encrypted with storage key {0}, but no storage key is configured; configure [encryption] (or --storage-key-file) with it"
    )]
    NoKeys(KeyId),
    /// Authentication failed: changed bytes, or a value moved from another table.
    #[error(
        "a record of {area} encrypted with storage key {key} does not open: it was changed, damaged or moved outside the store"
    )]
    Damaged {
        /// The key the record names.
        key: KeyId,
        /// The table it was read from.
        area: String,
    },
    /// The record is too short, or its text form is not base64.
    #[error(
        "a stored encrypted record is malformed ({0}); it was changed or damaged outside the store"
    )]
    Malformed(&'static str),
    /// Beyond what the cipher can encrypt (256 GiB): never a real record.
    #[error("a record of {0} bytes is too large to encrypt")]
    TooLarge(usize),
}

impl From<EncryptionError> for BackendError {
    fn from(e: EncryptionError) -> Self {
        Self::StorageKey(e.to_string())
    }
}

/// What a re-encryption (`reencrypt` of either backend) did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReencryptReport {
    /// Each table and the records rewritten in it.
    pub tables: Vec<(String, u64)>,
    /// The key ids no longer registered: no record is encrypted with them any more.
    pub retired: Vec<String>,
}

/// The keys a store encrypts with: none (records are stored as plaintext), or a current key that
/// encrypts every new record and retired keys that only open old ones. Cheap to clone.
#[derive(Clone, Default)]
pub struct Encryption {
    keys: Option<Arc<Keyring>>,
}

struct Keyring {
    current: StorageKey,
    retired: Vec<StorageKey>,
}

impl fmt::Debug for Encryption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.keys {
            None => f.write_str("Encryption(plaintext)"),
            Some(k) => write!(
                f,
                "Encryption(current {}, retired {:?})",
                k.current.id,
                k.retired.iter().map(|r| r.id).collect::<Vec<_>>()
            ),
        }
    }
}

impl Encryption {
    /// Stores records as plaintext (and refuses to open encrypted ones).
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// Encrypts new records with `current`; decrypts records encrypted with it or with any of `retired`.
    pub fn new(current: StorageKey, retired: Vec<StorageKey>) -> Self {
        Self {
            keys: Some(Arc::new(Keyring { current, retired })),
        }
    }

    /// The id of the key new records are encrypted with, when there is one.
    pub fn current(&self) -> Option<KeyId> {
        self.keys.as_ref().map(|k| k.current.id)
    }

    fn key(&self, id: KeyId) -> Result<&StorageKey, EncryptionError> {
        let keys = self.keys.as_ref().ok_or(EncryptionError::NoKeys(id))?;
        std::iter::once(&keys.current)
            .chain(&keys.retired)
            .find(|k| k.id == id)
            .ok_or(EncryptionError::UnknownKey(id))
    }

    /// `plain` as stored in `area`: unchanged without keys, else encrypted (binary form).
    pub fn encrypt(&self, area: &str, plain: Vec<u8>) -> Result<Vec<u8>, EncryptionError> {
        let Some(keys) = &self.keys else {
            return Ok(plain);
        };
        let (nonce, encrypted) = keys.current.encrypt(area, &plain)?;
        let mut out = Vec::with_capacity(1 + 4 + NONCE + encrypted.len());
        out.push(ENCRYPTED);
        out.extend_from_slice(&keys.current.id.0);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&encrypted);
        Ok(out)
    }

    /// What [`Encryption::encrypt`] stored in `area`: a record that is not encrypted is returned as it is.
    pub fn decrypt<'a>(
        &self,
        area: &str,
        stored: &'a [u8],
    ) -> Result<Cow<'a, [u8]>, EncryptionError> {
        if stored.first() != Some(&ENCRYPTED) {
            return Ok(Cow::Borrowed(stored));
        }
        let (id, rest) = split_id(&stored[1..])?;
        let (nonce, encrypted) = split_nonce(rest)?;
        self.key(id)?
            .decrypt(area, nonce, encrypted)
            .map(Cow::Owned)
    }

    /// The JSON `text` as stored in a text column of `area`: unchanged without keys, else
    /// compressed when that pays (as `redb::record::pack`) and encrypted (text form).
    pub fn encrypt_text(&self, area: &str, text: String) -> Result<String, EncryptionError> {
        let Some(keys) = &self.keys else {
            return Ok(text);
        };
        let packed = crate::redb::record::pack(text.into_bytes());
        let (nonce, encrypted) = keys.current.encrypt(area, &packed)?;
        let mut body = Vec::with_capacity(NONCE + encrypted.len());
        body.extend_from_slice(&nonce);
        body.extend_from_slice(&encrypted);
        Ok(format!(
            "{TEXT_PREFIX}{}:{}",
            keys.current.id,
            BASE64.encode(body)
        ))
    }

    /// The JSON text [`Encryption::encrypt_text`] stored in `area`: a text that is not encrypted is
    /// returned as it is.
    pub fn decrypt_text<'a>(
        &self,
        area: &str,
        stored: &'a str,
    ) -> Result<Cow<'a, str>, EncryptionError> {
        let Some(rest) = stored.strip_prefix(TEXT_PREFIX) else {
            return Ok(Cow::Borrowed(stored));
        };
        let (id, body) = rest
            .split_once(':')
            .ok_or(EncryptionError::Malformed("no key id"))?;
        let id = KeyId::parse(id).ok_or(EncryptionError::Malformed(
            "a key id that is not 8 hex digits",
        ))?;
        let body = BASE64
            .decode(body)
            .map_err(|_| EncryptionError::Malformed("not base64"))?;
        let (nonce, encrypted) = split_nonce(&body)?;
        let packed = self.key(id)?.decrypt(area, nonce, encrypted)?;
        let text = crate::redb::record::unpack(&packed).map_err(|_| {
            EncryptionError::Malformed("a compressed record that does not decompress")
        })?;
        String::from_utf8(text.into_owned())
            .map(Cow::Owned)
            .map_err(|_| EncryptionError::Malformed("not UTF-8 once opened"))
    }

    /// Whether the stored record (either form) is already encrypted with the current key, so that
    /// re-encrypting it would change nothing ([`Encryption::current`] being `None`: whether it is
    /// plaintext).
    pub fn is_current(&self, stored: &[u8]) -> bool {
        let id = match stored.first() {
            Some(&ENCRYPTED) => split_id(&stored[1..]).ok().map(|(id, _)| id),
            _ => match stored.strip_prefix(TEXT_PREFIX.as_bytes()) {
                Some(rest) => rest
                    .get(..8)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(KeyId::parse),
                None => None,
            },
        };
        id == self.current()
    }

    /// `stored` (binary form) encrypted with the current key: `None` when it already is.
    pub fn reencrypt(&self, area: &str, stored: &[u8]) -> Result<Option<Vec<u8>>, EncryptionError> {
        if self.is_current(stored) {
            return Ok(None);
        }
        let plain = self.decrypt(area, stored)?.into_owned();
        self.encrypt(area, plain).map(Some)
    }

    /// `stored` (text form) encrypted with the current key: `None` when it already is.
    pub fn reencrypt_text(
        &self,
        area: &str,
        stored: &str,
    ) -> Result<Option<String>, EncryptionError> {
        if self.is_current(stored.as_bytes()) {
            return Ok(None);
        }
        let json = self.decrypt_text(area, stored)?.into_owned();
        self.encrypt_text(area, json).map(Some)
    }

    /// The `LIKE` pattern of text records encrypted with the current key (`None` without keys).
    pub fn current_text_pattern(&self) -> Option<String> {
        self.current().map(|id| format!("{TEXT_PREFIX}{id}:%"))
    }

    /// Checks the keys registered in a store (`(key id, canary)` pairs) against this enc, at
    /// start: every registered key must be configured and open its canary. Answers the pair to
    /// register for the current key when it is not registered yet.
    pub fn admit(
        &self,
        registered: &[(String, Vec<u8>)],
    ) -> Result<Option<(String, Vec<u8>)>, BackendError> {
        let mut current_known = false;
        for (id, canary) in registered {
            let parsed = KeyId::parse(id).ok_or_else(|| {
                BackendError::StorageKey(format!(
                    "the store registers a key id `{id}` that is not 8 hex digits; the storage_keys table was changed outside cra"
                ))
            })?;
            let key = self.key(parsed).map_err(|e| {
                BackendError::StorageKey(match e {
                    EncryptionError::NoKeys(_) => format!(
                        "this store holds records encrypted with storage key {id}, and no storage key is configured; configure [encryption] key_file or key_env (or --storage-key-file) with that key"
                    ),
                    _ => format!(
                        "this store holds records encrypted with storage key {id}, which is not among the configured keys ({}); add it as a retired key, or use the key it was encrypted with",
                        self.configured()
                    ),
                })
            })?;
            self.decrypt(REGISTRY, canary)
                .ok()
                .filter(|c| c.as_ref() == CANARY)
                .ok_or_else(|| {
                    BackendError::StorageKey(format!(
                        "storage key {} does not open the canary registered for it: the key file is not the key that encrypted this store",
                        key.id
                    ))
                })?;
            current_known |= Some(parsed) == self.current();
        }
        match &self.keys {
            Some(keys) if !current_known => {
                let canary = self
                    .encrypt(REGISTRY, CANARY.to_vec())
                    .map_err(|e| BackendError::StorageKey(e.to_string()))?;
                Ok(Some((keys.current.id.to_string(), canary)))
            }
            _ => Ok(None),
        }
    }

    fn configured(&self) -> String {
        match &self.keys {
            None => "none".into(),
            Some(k) => std::iter::once(&k.current)
                .chain(&k.retired)
                .map(|k| k.id.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

fn split_id(bytes: &[u8]) -> Result<(KeyId, &[u8]), EncryptionError> {
    let (id, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(EncryptionError::Malformed("shorter than a key id"))?;
    Ok((KeyId(*id), rest))
}

fn split_nonce(bytes: &[u8]) -> Result<(&[u8], &[u8]), EncryptionError> {
    if bytes.len() < NONCE + 16 {
        return Err(EncryptionError::Malformed("shorter than a nonce and a tag"));
    }
    Ok(bytes.split_at(NONCE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> StorageKey {
        StorageKey::from_bytes(&[byte; KEY_BYTES])
    }

    #[test]
    fn an_encrypted_record_decrypts_to_its_plaintext_in_both_forms_and_hides_it() {
        let enc = Encryption::new(key(1), Vec::new());
        let plain = br#"{"secret":"marker-8b1f"}"#.to_vec();
        let stored = enc.encrypt("t", plain.clone()).unwrap();
        assert!(!stored.windows(6).any(|w| w == b"marker"));
        assert_eq!(enc.decrypt("t", &stored).unwrap().as_ref(), plain);
        let long = format!(r#"{{"secret":"{}"}}"#, "marker ".repeat(500));
        let text = enc.encrypt_text("t", long.clone()).unwrap();
        assert!(text.starts_with("encrypted:") && !text.contains("marker"));
        assert_eq!(enc.decrypt_text("t", &text).unwrap(), long);
        assert!(enc.is_current(&stored) && enc.is_current(text.as_bytes()));
    }

    #[test]
    fn a_record_moved_to_another_table_or_changed_does_not_open() {
        let enc = Encryption::new(key(1), Vec::new());
        let mut stored = enc.encrypt("a", b"{}".to_vec()).unwrap();
        assert!(matches!(
            enc.decrypt("b", &stored),
            Err(EncryptionError::Damaged { .. })
        ));
        let last = stored.len() - 1;
        stored[last] ^= 1;
        assert!(matches!(
            enc.decrypt("a", &stored),
            Err(EncryptionError::Damaged { .. })
        ));
        assert!(matches!(
            enc.decrypt("a", &[ENCRYPTED, 1]),
            Err(EncryptionError::Malformed(_))
        ));
        assert!(matches!(
            enc.decrypt_text("a", "encrypted:zz:AAAA"),
            Err(EncryptionError::Malformed(_))
        ));
    }

    #[test]
    fn plaintext_reads_through_any_encryption_and_encrypted_records_need_their_key() {
        let plain = Encryption::plaintext();
        assert_eq!(plain.encrypt("t", b"{}".to_vec()).unwrap(), b"{}");
        let old = Encryption::new(key(1), Vec::new());
        assert_eq!(old.decrypt_text("t", "{\"a\":1}").unwrap(), "{\"a\":1}");
        let stored = old.encrypt("t", b"{}".to_vec()).unwrap();
        assert!(matches!(
            plain.decrypt("t", &stored),
            Err(EncryptionError::NoKeys(_))
        ));
        assert!(matches!(
            Encryption::new(key(2), Vec::new()).decrypt("t", &stored),
            Err(EncryptionError::UnknownKey(_))
        ));
        let rotated = Encryption::new(key(2), vec![key(1)]);
        assert_eq!(rotated.decrypt("t", &stored).unwrap().as_ref(), b"{}");
        assert!(!rotated.is_current(&stored));
    }

    #[test]
    fn admission_registers_the_current_key_and_refuses_a_store_encrypted_with_another() {
        let first = Encryption::new(key(1), Vec::new());
        let registered = vec![first.admit(&[]).unwrap().unwrap()];
        assert_eq!(first.admit(&registered).unwrap(), None);
        let err = Encryption::plaintext()
            .admit(&registered)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no storage key is configured"), "{err}");
        let err = Encryption::new(key(2), Vec::new())
            .admit(&registered)
            .unwrap_err();
        assert!(
            err.to_string().contains("not among the configured keys"),
            "{err}"
        );
        let rotated = Encryption::new(key(2), vec![key(1)]);
        let (id, _) = rotated.admit(&registered).unwrap().unwrap();
        assert_eq!(id, key(2).id().to_string());
    }

    #[test]
    fn keys_parse_from_hex_or_base64_and_nothing_else() {
        let hex_text = "01".repeat(32);
        assert_eq!(
            StorageKey::parse(&format!("{hex_text}\n")).unwrap().id(),
            key(1).id()
        );
        let b64 = StorageKey::generate_text();
        assert!(StorageKey::parse(&b64).is_ok());
        assert!(StorageKey::parse("short").is_err());
        assert!(StorageKey::parse(&"zz".repeat(32)).is_err());
        assert!(format!("{:?}", key(1)).contains("redacted"));
    }
}

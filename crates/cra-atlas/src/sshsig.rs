//! OpenSSH signatures (SSHSIG, `PROTOCOL.sshsig` in OpenSSH's source) over Ed25519 keys, so
//! that what `cra atlas sign` writes `ssh-keygen -Y verify` accepts, and what `ssh-keygen -Y
//! sign` writes cra accepts.
//!
//! Only Ed25519 (`ssh-ed25519`) keys are supported: public keys in the one-line OpenSSH form
//! (`ssh-ed25519 AAAA... comment`), private keys in the unencrypted `openssh-key-v1` form
//! (`-----BEGIN OPENSSH PRIVATE KEY-----`, cipher `none`). An encrypted private key, an
//! ssh-agent, certificates and other key types (RSA, ECDSA, security keys) are refused with an
//! error saying so.
//!
//! A signature is the armored (`-----BEGIN SSH SIGNATURE-----`) base64 of the blob
//! `"SSHSIG" | uint32 1 | string publickey | string namespace | string reserved |
//! string hash_algorithm | string signature`; what the key signs is
//! `"SSHSIG" | string namespace | string reserved | string hash_algorithm | string H(message)`.
//! We sign with `sha512` (as `ssh-keygen` does) and accept `sha256` or `sha512`. Every parse is
//! bounds-checked: hostile input is an error, never a panic.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256, Sha512};

/// The only key type supported.
pub const KEY_TYPE: &str = "ssh-ed25519";
/// The first line of an armored signature.
pub const BEGIN_SIGNATURE: &str = "-----BEGIN SSH SIGNATURE-----";
/// The last line of an armored signature.
pub const END_SIGNATURE: &str = "-----END SSH SIGNATURE-----";
const BEGIN_PRIVATE: &str = "-----BEGIN OPENSSH PRIVATE KEY-----";
const END_PRIVATE: &str = "-----END OPENSSH PRIVATE KEY-----";
const MAGIC: &[u8; 6] = b"SSHSIG";
const PRIVATE_MAGIC: &[u8] = b"openssh-key-v1\0";
const VERSION: u32 = 1;
/// Base64 characters per armored line (as `ssh-keygen` writes them).
const LINE: usize = 70;

/// Why a key or signature could not be read, or a signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshSigError {
    /// The text is not what was expected (names what was wrong).
    #[error("{0}")]
    Malformed(String),
    /// A key or signature of a type other than Ed25519.
    #[error(
        "key type `{0}` is not supported: cra signs and verifies atlases with Ed25519 keys only (make one with `ssh-keygen -t ed25519`)"
    )]
    UnsupportedKeyType(String),
    /// The private key is protected by a passphrase.
    #[error(
        "the private key is encrypted (cipher `{0}`): cra reads only unencrypted OpenSSH keys and does not use ssh-agent; give an unencrypted key file, or sign with `ssh-keygen -Y sign -n cra-atlas` instead"
    )]
    EncryptedKey(String),
    /// The signature names a hash algorithm other than sha256 or sha512.
    #[error("hash algorithm `{0}` is not supported (sha256 or sha512 are)")]
    UnsupportedHash(String),
    /// The signature was made for another purpose.
    #[error(
        "the signature is for namespace `{found}`, not `{expected}`: it was made for another purpose; sign with namespace `{expected}`"
    )]
    WrongNamespace {
        /// The namespace required here.
        expected: String,
        /// The namespace in the signature.
        found: String,
    },
    /// The signature does not match the message and the key it names.
    #[error("the signature does not match: the signed content or the signature was changed")]
    BadSignature,
}

fn malformed(what: impl Into<String>) -> SshSigError {
    SshSigError::Malformed(what.into())
}

/// Reads SSH wire-format fields (RFC 4251 `uint32`, `string`) without ever reading past the end.
struct Reader<'a> {
    rest: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Self { rest: bytes, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], SshSigError> {
        if self.rest.len() < n {
            return Err(malformed(format!("{} is truncated", self.what)));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, SshSigError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self) -> Result<&'a [u8], SshSigError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn text(&mut self) -> Result<&'a str, SshSigError> {
        let b = self.string()?;
        std::str::from_utf8(b)
            .map_err(|_| malformed(format!("{} holds text that is not UTF-8", self.what)))
    }

    fn finish(&self) -> Result<(), SshSigError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(malformed(format!("{} has trailing bytes", self.what)))
        }
    }
}

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    // Every field we write is far below 4 GiB (keys, namespaces, 64-byte digests).
    let n = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// An Ed25519 public key, with the comment it was written with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: VerifyingKey,
    /// The comment after the key in its one-line form (often `user@host`); may be empty.
    pub comment: String,
}

impl PublicKey {
    /// Parses the one-line OpenSSH form `ssh-ed25519 AAAA... [comment]` (as in `key.pub`).
    pub fn parse_openssh(line: &str) -> Result<Self, SshSigError> {
        let mut parts = line.split_whitespace();
        let kind = parts
            .next()
            .ok_or_else(|| malformed("the public key is empty"))?;
        if kind != KEY_TYPE {
            return Err(SshSigError::UnsupportedKeyType(kind.to_owned()));
        }
        let b64 = parts
            .next()
            .ok_or_else(|| malformed("the public key has no base64 part after `ssh-ed25519`"))?;
        let blob = STANDARD
            .decode(b64)
            .map_err(|e| malformed(format!("the public key's base64 is invalid: {e}")))?;
        let mut key = Self::from_blob(&blob)?;
        key.comment = parts.collect::<Vec<_>>().join(" ");
        Ok(key)
    }

    /// The key of an SSH public-key blob (`string "ssh-ed25519" | string key`).
    fn from_blob(blob: &[u8]) -> Result<Self, SshSigError> {
        let mut r = Reader::new(blob, "the public key");
        let kind = r.text()?;
        if kind != KEY_TYPE {
            return Err(SshSigError::UnsupportedKeyType(kind.to_owned()));
        }
        let raw = r.string()?;
        r.finish()?;
        let raw: [u8; 32] = raw
            .try_into()
            .map_err(|_| malformed("an Ed25519 public key is 32 bytes"))?;
        let key = VerifyingKey::from_bytes(&raw)
            .map_err(|_| malformed("the Ed25519 public key is not a valid curve point"))?;
        Ok(Self {
            key,
            comment: String::new(),
        })
    }

    fn blob(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(51);
        put_string(&mut out, KEY_TYPE.as_bytes());
        put_string(&mut out, self.key.as_bytes());
        out
    }

    /// The one-line OpenSSH form, `ssh-ed25519 AAAA...` and the comment if any.
    pub fn to_openssh(&self) -> String {
        let b64 = STANDARD.encode(self.blob());
        if self.comment.is_empty() {
            format!("{KEY_TYPE} {b64}")
        } else {
            format!("{KEY_TYPE} {b64} {}", self.comment)
        }
    }

    /// The fingerprint as `ssh-keygen -l` prints it: `SHA256:` and the unpadded base64 of the
    /// SHA-256 of the key blob.
    pub fn fingerprint(&self) -> String {
        format!(
            "SHA256:{}",
            STANDARD_NO_PAD.encode(Sha256::digest(self.blob()))
        )
    }

    /// Whether two keys are the same key (comments aside).
    pub fn same_key(&self, other: &PublicKey) -> bool {
        self.key == other.key
    }
}

/// An Ed25519 private key read from an unencrypted OpenSSH key file.
pub struct PrivateKey {
    signing: SigningKey,
    comment: String,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateKey({})", self.public_key().fingerprint())
    }
}

impl PrivateKey {
    /// A key from its 32-byte seed (tests).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            signing: SigningKey::from_bytes(&seed),
            comment: String::new(),
        }
    }

    /// Parses `-----BEGIN OPENSSH PRIVATE KEY-----` text (`openssh-key-v1`, cipher `none`, one
    /// Ed25519 key), as `ssh-keygen -t ed25519 -N ''` writes it.
    pub fn parse_openssh(text: &str) -> Result<Self, SshSigError> {
        let body = armored_body(text, BEGIN_PRIVATE, END_PRIVATE, "an OpenSSH private key")?;
        let mut r = Reader::new(&body, "the private key");
        if r.take(PRIVATE_MAGIC.len())? != PRIVATE_MAGIC {
            return Err(malformed(
                "the private key is not in the openssh-key-v1 format",
            ));
        }
        let cipher = r.text()?;
        let kdf = r.text()?;
        let _kdf_options = r.string()?;
        if cipher != "none" || kdf != "none" {
            return Err(SshSigError::EncryptedKey(cipher.to_owned()));
        }
        if r.u32()? != 1 {
            return Err(malformed(
                "the key file holds more than one key; give a file with one",
            ));
        }
        let public = PublicKey::from_blob(r.string()?)?;
        let section = r.string()?;
        r.finish()?;
        let mut p = Reader::new(section, "the private key");
        if p.u32()? != p.u32()? {
            return Err(malformed(
                "the private key's check numbers differ: the file is damaged",
            ));
        }
        let kind = p.text()?;
        if kind != KEY_TYPE {
            return Err(SshSigError::UnsupportedKeyType(kind.to_owned()));
        }
        let pub_raw = p.string()?;
        let secret = p.string()?;
        let comment = p.text()?.to_owned();
        if secret.len() != 64 || pub_raw != public.key.as_bytes() || &secret[32..] != pub_raw {
            return Err(malformed(
                "the private key's parts do not agree: the file is damaged",
            ));
        }
        let mut seed = [0u8; 32];
        seed.copy_from_slice(&secret[..32]);
        let signing = SigningKey::from_bytes(&seed);
        if signing.verifying_key() != public.key {
            return Err(malformed(
                "the private key does not match its public key: the file is damaged",
            ));
        }
        Ok(Self { signing, comment })
    }

    /// Its public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            key: self.signing.verifying_key(),
            comment: self.comment.clone(),
        }
    }

    /// Signs `message` for `namespace` (hash sha512).
    pub fn sign(&self, namespace: &str, message: &[u8]) -> Signature {
        let hash = HashAlg::Sha512;
        let signed = signed_data(namespace, hash, message);
        Signature {
            public_key: self.public_key(),
            namespace: namespace.to_owned(),
            hash,
            signature: self.signing.sign(&signed).to_bytes(),
        }
    }
}

/// The hash a signature is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlg {
    /// `sha256`.
    Sha256,
    /// `sha512` (what we and `ssh-keygen` sign with).
    Sha512,
}

impl HashAlg {
    fn name(self) -> &'static str {
        match self {
            HashAlg::Sha256 => "sha256",
            HashAlg::Sha512 => "sha512",
        }
    }

    fn hash(self, message: &[u8]) -> Vec<u8> {
        match self {
            HashAlg::Sha256 => Sha256::digest(message).to_vec(),
            HashAlg::Sha512 => Sha512::digest(message).to_vec(),
        }
    }
}

/// What the key signs (module documentation).
fn signed_data(namespace: &str, hash: HashAlg, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(MAGIC);
    put_string(&mut out, namespace.as_bytes());
    put_string(&mut out, b"");
    put_string(&mut out, hash.name().as_bytes());
    put_string(&mut out, &hash.hash(message));
    out
}

/// A parsed SSHSIG signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The key the signature says made it (still to be checked against trusted keys).
    pub public_key: PublicKey,
    /// What it was made for.
    pub namespace: String,
    /// The hash of the message it signs.
    pub hash: HashAlg,
    signature: [u8; 64],
}

impl Signature {
    /// The armored text (`-----BEGIN SSH SIGNATURE-----`, base64 in lines of 70, end line,
    /// newline), as `ssh-keygen -Y sign` writes it.
    pub fn to_armored(&self) -> String {
        let mut blob = Vec::with_capacity(160);
        blob.extend_from_slice(MAGIC);
        blob.extend_from_slice(&VERSION.to_be_bytes());
        put_string(&mut blob, &self.public_key.blob());
        put_string(&mut blob, self.namespace.as_bytes());
        put_string(&mut blob, b"");
        put_string(&mut blob, self.hash.name().as_bytes());
        let mut sig = Vec::with_capacity(83);
        put_string(&mut sig, KEY_TYPE.as_bytes());
        put_string(&mut sig, &self.signature);
        put_string(&mut blob, &sig);
        let b64 = STANDARD.encode(&blob);
        let mut out = String::with_capacity(b64.len() + 80);
        out.push_str(BEGIN_SIGNATURE);
        out.push('\n');
        for chunk in b64.as_bytes().chunks(LINE) {
            out.push_str(&String::from_utf8_lossy(chunk));
            out.push('\n');
        }
        out.push_str(END_SIGNATURE);
        out.push('\n');
        out
    }

    /// Parses armored signature text (any line length; surrounding whitespace ignored).
    pub fn parse_armored(text: &str) -> Result<Self, SshSigError> {
        let blob = armored_body(text, BEGIN_SIGNATURE, END_SIGNATURE, "an SSH signature")?;
        let mut r = Reader::new(&blob, "the signature");
        if r.take(MAGIC.len())? != MAGIC {
            return Err(malformed("the signature does not start with SSHSIG"));
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(malformed(format!(
                "signature version {version} is not supported (1 is)"
            )));
        }
        let public_key = PublicKey::from_blob(r.string()?)?;
        let namespace = r.text()?.to_owned();
        let _reserved = r.string()?;
        let hash = match r.text()? {
            "sha256" => HashAlg::Sha256,
            "sha512" => HashAlg::Sha512,
            other => return Err(SshSigError::UnsupportedHash(other.to_owned())),
        };
        let sig_blob = r.string()?;
        r.finish()?;
        let mut s = Reader::new(sig_blob, "the signature");
        let kind = s.text()?;
        if kind != KEY_TYPE {
            return Err(SshSigError::UnsupportedKeyType(kind.to_owned()));
        }
        let signature: [u8; 64] = s
            .string()?
            .try_into()
            .map_err(|_| malformed("an Ed25519 signature is 64 bytes"))?;
        s.finish()?;
        Ok(Self {
            public_key,
            namespace,
            hash,
            signature,
        })
    }

    /// Checks that the signature is for `namespace` and that its key signed `message`. Whether
    /// that key is trusted is the caller's question.
    pub fn verify(&self, namespace: &str, message: &[u8]) -> Result<(), SshSigError> {
        if self.namespace != namespace {
            return Err(SshSigError::WrongNamespace {
                expected: namespace.to_owned(),
                found: self.namespace.clone(),
            });
        }
        let signed = signed_data(namespace, self.hash, message);
        let sig = ed25519_dalek::Signature::from_bytes(&self.signature);
        self.public_key
            .key
            .verify_strict(&signed, &sig)
            .map_err(|_| SshSigError::BadSignature)
    }
}

/// The decoded base64 between `begin` and `end` lines.
fn armored_body(text: &str, begin: &str, end: &str, what: &str) -> Result<Vec<u8>, SshSigError> {
    let text = text.trim();
    let inner = text
        .strip_prefix(begin)
        .and_then(|t| t.strip_suffix(end))
        .ok_or_else(|| {
            malformed(format!(
                "this is not {what}: it must start with `{begin}` and end with `{end}`"
            ))
        })?;
    let b64: String = inner.split_whitespace().collect();
    STANDARD
        .decode(b64)
        .map_err(|e| malformed(format!("the base64 of {what} is invalid: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> PrivateKey {
        PrivateKey::from_seed([seed; 32])
    }

    #[test]
    fn a_signature_round_trips_through_its_armor_and_verifies() {
        let k = key(7);
        let sig = k.sign("cra-atlas", b"hello");
        let text = sig.to_armored();
        assert!(
            text.starts_with(BEGIN_SIGNATURE) && text.ends_with("-----END SSH SIGNATURE-----\n")
        );
        assert!(
            text.lines()
                .all(|l| l.len() <= LINE || l.starts_with("-----"))
        );
        let back = Signature::parse_armored(&text).unwrap();
        assert_eq!(back, sig);
        back.verify("cra-atlas", b"hello").unwrap();
        assert!(back.public_key.same_key(&k.public_key()));
    }

    #[test]
    fn a_changed_message_or_flipped_byte_fails() {
        let k = key(7);
        let text = k.sign("cra-atlas", b"hello").to_armored();
        let sig = Signature::parse_armored(&text).unwrap();
        assert_eq!(
            sig.verify("cra-atlas", b"hellp"),
            Err(SshSigError::BadSignature)
        );
        // Flip every byte of the blob in turn: each either fails to parse or fails to verify.
        let blob = armored_body(&text, BEGIN_SIGNATURE, END_SIGNATURE, "x").unwrap();
        for i in 0..blob.len() {
            let mut b = blob.clone();
            b[i] ^= 0x01;
            let armored = format!(
                "{BEGIN_SIGNATURE}\n{}\n{END_SIGNATURE}\n",
                STANDARD.encode(&b)
            );
            let outcome = Signature::parse_armored(&armored)
                .and_then(|s| s.verify("cra-atlas", b"hello").map(|()| s));
            // The only tolerated change is to the key, which then no longer matches the
            // signature unless it is another valid key: the caller's trust check catches that.
            if let Ok(s) = outcome {
                panic!(
                    "byte {i} flipped still verifies with key {}",
                    s.public_key.fingerprint()
                );
            }
        }
    }

    #[test]
    fn a_wrong_namespace_is_named() {
        let sig = key(1).sign("file", b"m");
        let e = sig.verify("cra-atlas", b"m").unwrap_err();
        assert!(matches!(e, SshSigError::WrongNamespace { .. }), "{e}");
        assert!(e.to_string().contains("`file`"), "{e}");
    }

    #[test]
    fn another_key_is_another_key() {
        let sig = key(1).sign("cra-atlas", b"m");
        assert!(!sig.public_key.same_key(&key(2).public_key()));
    }

    #[test]
    fn public_keys_round_trip_and_other_types_are_refused() {
        let pk = key(3).public_key();
        let line = format!("{} me@host", pk.to_openssh());
        let back = PublicKey::parse_openssh(&line).unwrap();
        assert!(back.same_key(&pk));
        assert_eq!(back.comment, "me@host");
        assert!(back.fingerprint().starts_with("SHA256:"));
        let e = PublicKey::parse_openssh("ssh-rsa AAAAB3NzaC1yc2E= x").unwrap_err();
        assert!(e.to_string().contains("Ed25519 keys only"), "{e}");
        assert!(PublicKey::parse_openssh("ssh-ed25519 !!!").is_err());
        assert!(PublicKey::parse_openssh("").is_err());
    }

    #[test]
    fn hostile_text_is_an_error_not_a_panic() {
        for text in [
            "",
            BEGIN_SIGNATURE,
            "-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----",
            "-----BEGIN SSH SIGNATURE-----\n////\n-----END SSH SIGNATURE-----",
        ] {
            assert!(Signature::parse_armored(text).is_err(), "{text}");
        }
        assert!(
            PrivateKey::parse_openssh(
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbg==\n-----END OPENSSH PRIVATE KEY-----"
            )
            .is_err()
        );
    }

    /// An unencrypted key file in the layout `ssh-keygen` writes (module documentation).
    fn key_file(k: &PrivateKey, cipher: &str) -> String {
        let pk = k.public_key();
        let mut section = Vec::new();
        section.extend_from_slice(&0x0102_0304u32.to_be_bytes());
        section.extend_from_slice(&0x0102_0304u32.to_be_bytes());
        put_string(&mut section, KEY_TYPE.as_bytes());
        put_string(&mut section, pk.key.as_bytes());
        let mut secret = k.signing.to_bytes().to_vec();
        secret.extend_from_slice(pk.key.as_bytes());
        put_string(&mut section, &secret);
        put_string(&mut section, b"me@host");
        let mut pad = 1u8;
        while section.len() % 8 != 0 {
            section.push(pad);
            pad += 1;
        }
        let mut body = PRIVATE_MAGIC.to_vec();
        put_string(&mut body, cipher.as_bytes());
        put_string(
            &mut body,
            if cipher == "none" { b"none" } else { b"bcrypt" },
        );
        put_string(&mut body, b"");
        body.extend_from_slice(&1u32.to_be_bytes());
        put_string(&mut body, &pk.blob());
        put_string(&mut body, &section);
        format!(
            "{BEGIN_PRIVATE}\n{}\n{END_PRIVATE}\n",
            STANDARD.encode(body)
        )
    }

    #[test]
    fn private_keys_are_read_and_encrypted_ones_refused() {
        let k = key(9);
        let read = PrivateKey::parse_openssh(&key_file(&k, "none")).unwrap();
        assert!(read.public_key().same_key(&k.public_key()));
        assert_eq!(read.public_key().comment, "me@host");
        let e = PrivateKey::parse_openssh(&key_file(&k, "aes256-ctr")).unwrap_err();
        assert!(matches!(e, SshSigError::EncryptedKey(_)), "{e}");
        assert!(e.to_string().contains("unencrypted"), "{e}");
    }
}

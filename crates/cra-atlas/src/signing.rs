//! Signed atlases (`specs/atlas-signing.md`): an SSHSIG signature ([`crate::sshsig`]) over the
//! atlas digest, so one signature holds for a directory, its archive and the same files
//! installed inline.
//!
//! * The signed message is the atlas digest exactly as [`crate::LoadedAtlas::digest`] holds it:
//!   64 lowercase hex characters, no prefix, no newline ([`message`]).
//! * The namespace is [`NAMESPACE`] (`cra-atlas`): a signature made for anything else (`git`,
//!   `file`) is refused.
//! * Where a signature lives ([`signature_path`]): for a directory, the file [`DIR_SIGNATURE`]
//!   (`.atlas.sig`) inside it, which the loader skips like every `.` entry, so it is outside the
//!   digest; for an archive `x.atlas.tar.gz`, the file `x.atlas.tar.gz.sig` beside it.
//! * Trust ([`Trust`]): a list of OpenSSH public keys, or an `allowed_signers` file in the
//!   format `ssh-keygen -Y verify` reads (principals, optional `namespaces="..."`, key). A
//!   signature verifies when its key is one of them and it signs this digest for `cra-atlas`.

use std::path::{Path, PathBuf};

use crate::sshsig::{PrivateKey, PublicKey, Signature, SshSigError};

/// The SSHSIG namespace of atlas signatures.
pub const NAMESPACE: &str = "cra-atlas";
/// The signature file inside a signed atlas directory (skipped by the loader: not in the digest).
pub const DIR_SIGNATURE: &str = ".atlas.sig";

/// The bytes a signature signs for the atlas with this digest.
pub fn message(digest: &str) -> &[u8] {
    digest.as_bytes()
}

/// Where the signature of the atlas at `source` lives: `source/.atlas.sig` for a directory,
/// `source.sig` for an archive (or anything else).
pub fn signature_path(source: &Path) -> PathBuf {
    if source.is_dir() {
        source.join(DIR_SIGNATURE)
    } else {
        let mut name = source.as_os_str().to_owned();
        name.push(".sig");
        PathBuf::from(name)
    }
}

/// Signs the atlas digest `digest` with `key`; answers the armored signature text.
pub fn sign_digest(key: &PrivateKey, digest: &str) -> String {
    key.sign(NAMESPACE, message(digest)).to_armored()
}

/// Why an atlas's signature was not accepted, or trust could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// No signature where it should be.
    #[error(
        "atlas {} is not signed: no signature at {} (sign it with `cra atlas sign`)",
        atlas.display(), signature.display()
    )]
    Unsigned {
        /// The atlas.
        atlas: PathBuf,
        /// Where its signature was looked for.
        signature: PathBuf,
    },
    /// A file could not be read.
    #[error("could not read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The signature is not a usable SSHSIG signature, or it does not verify.
    #[error("the atlas signature is not valid: {0}")]
    Invalid(SshSigError),
    /// A valid signature by a key that is not trusted.
    #[error(
        "the atlas is signed by key {fingerprint}, which is not a trusted key: add it to the trusted keys, or sign with a trusted key"
    )]
    Untrusted {
        /// The signing key's fingerprint.
        fingerprint: String,
    },
    /// A trusted key (or `allowed_signers` line) could not be read.
    #[error("trusted key {at}: {message}")]
    BadTrust {
        /// Which key: `trusted_keys[2]`, `allowed_signers:7`.
        at: String,
        /// What is wrong with it.
        message: String,
    },
}

impl SigningError {
    /// Whether the atlas has no signature at all (rather than a bad one).
    pub fn is_unsigned(&self) -> bool {
        matches!(self, SigningError::Unsigned { .. })
    }
}

/// A trusted key and the principals `allowed_signers` names for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// The key.
    pub key: PublicKey,
    /// Who it is (from `allowed_signers`; a key given alone has its comment, if any).
    pub principals: Vec<String>,
}

/// The keys whose signatures are accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    keys: Vec<TrustedKey>,
}

/// Who signed an accepted atlas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The key's fingerprint (`SHA256:...`).
    pub fingerprint: String,
    /// Its principals.
    pub principals: Vec<String>,
}

impl Trust {
    /// No key: nothing verifies.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The trusted keys.
    pub fn keys(&self) -> &[TrustedKey] {
        &self.keys
    }

    /// Trusts a key given in the one-line OpenSSH form; `at` names it in errors.
    pub fn add_public_key(&mut self, line: &str, at: &str) -> Result<(), SigningError> {
        let key = PublicKey::parse_openssh(line).map_err(|e| SigningError::BadTrust {
            at: at.to_owned(),
            message: e.to_string(),
        })?;
        let principals = if key.comment.is_empty() {
            Vec::new()
        } else {
            vec![key.comment.clone()]
        };
        self.keys.push(TrustedKey { key, principals });
        Ok(())
    }

    /// Trusts the keys of an `allowed_signers` file's text (`ssh-keygen(1)`, "ALLOWED SIGNERS"):
    /// one `principals [options] keytype base64 [comment]` per line, `#` comments and blank
    /// lines skipped. A line whose `namespaces="..."` option does not list `cra-atlas` (or a
    /// pattern matching it) is not trusted for atlases. Lines for other key types are skipped
    /// (they cannot sign atlases); `cert-authority`, `valid-after` and `valid-before` are refused
    /// as unsupported, so no line is trusted more widely than it says. `origin` names the file
    /// in errors.
    pub fn add_allowed_signers(&mut self, text: &str, origin: &str) -> Result<(), SigningError> {
        for (i, line) in text.lines().enumerate() {
            let at = format!("{origin}:{}", i + 1);
            let bad = |message: String| SigningError::BadTrust {
                at: at.clone(),
                message,
            };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (principals, rest) = split_field(line);
            let (second, after) = split_field(rest);
            let (options, key_text) = if is_key_type(second) {
                ("", rest)
            } else {
                (second, after)
            };
            if principals.is_empty() || key_text.is_empty() {
                return Err(bad(
                    "expected `principals [options] ssh-ed25519 AAAA...`".to_owned()
                ));
            }
            let mut for_atlases = true;
            for option in split_options(options) {
                let (name, value) = option.split_once('=').unwrap_or((option, ""));
                match name.to_ascii_lowercase().as_str() {
                    "namespaces" => {
                        let list = value.trim_matches('"');
                        for_atlases = list.split(',').any(|p| wildcard_match(p.trim(), NAMESPACE));
                    }
                    other => {
                        return Err(bad(format!(
                            "option `{other}` is not supported for atlas signing keys; only `namespaces` is: remove it"
                        )));
                    }
                }
            }
            let (kind, _) = split_field(key_text);
            if kind != crate::sshsig::KEY_TYPE {
                continue;
            }
            if !for_atlases {
                continue;
            }
            let key = PublicKey::parse_openssh(key_text).map_err(|e| bad(e.to_string()))?;
            let principals = principals
                .trim_matches('"')
                .split(',')
                .map(str::to_owned)
                .collect();
            self.keys.push(TrustedKey { key, principals });
        }
        Ok(())
    }

    /// Checks that `armored` is a `cra-atlas` signature by a trusted key over `digest`.
    pub fn verify_digest(&self, digest: &str, armored: &str) -> Result<Signer, SigningError> {
        let sig = Signature::parse_armored(armored).map_err(SigningError::Invalid)?;
        let trusted = self
            .keys
            .iter()
            .find(|k| k.key.same_key(&sig.public_key))
            .ok_or_else(|| SigningError::Untrusted {
                fingerprint: sig.public_key.fingerprint(),
            })?;
        sig.verify(NAMESPACE, message(digest))
            .map_err(SigningError::Invalid)?;
        Ok(Signer {
            fingerprint: trusted.key.fingerprint(),
            principals: trusted.principals.clone(),
        })
    }

    /// Checks the signature stored for the atlas at `source` ([`signature_path`]) over `digest`.
    pub fn verify_at(&self, source: &Path, digest: &str) -> Result<Signer, SigningError> {
        self.verify_found(source, digest, read_signature(source)?.as_deref())
    }

    /// Checks `found`, the signature [`read_signature`] read for the atlas at `source`, over
    /// `digest`: [`SigningError::Unsigned`] when there was none.
    pub fn verify_found(
        &self,
        source: &Path,
        digest: &str,
        found: Option<&str>,
    ) -> Result<Signer, SigningError> {
        let Some(text) = found else {
            return Err(SigningError::Unsigned {
                atlas: source.to_owned(),
                signature: signature_path(source),
            });
        };
        self.verify_digest(digest, text)
    }
}

/// The signature text stored for the atlas at `source` ([`signature_path`]), or `None` when
/// there is none; not verified.
pub fn read_signature(source: &Path) -> Result<Option<String>, SigningError> {
    let path = signature_path(source);
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SigningError::Read { path, source }),
    }
}

fn is_key_type(field: &str) -> bool {
    field.starts_with("ssh-") || field.starts_with("ecdsa-") || field.starts_with("sk-")
}

/// The first whitespace-separated field (a `"..."` run counts as one) and the rest, trimmed.
fn split_field(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let mut quoted = false;
    for (i, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return (&text[..i], text[i..].trim_start()),
            _ => {}
        }
    }
    (text, "")
}

/// The comma-separated options of an `allowed_signers` line (commas inside quotes kept).
fn split_options(options: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in options.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&options[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < options.len() {
        out.push(&options[start..]);
    }
    out.into_iter().filter(|o| !o.is_empty()).collect()
}

/// `ssh` pattern matching (`*` any run, `?` one character), as namespaces lists use it.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

    fn trust_of(k: &PrivateKey) -> Trust {
        let mut t = Trust::new();
        t.add_public_key(&k.public_key().to_openssh(), "test")
            .unwrap();
        t
    }

    #[test]
    fn a_signed_digest_verifies_with_its_key_only() {
        let k = PrivateKey::from_seed([4; 32]);
        let sig = sign_digest(&k, DIGEST);
        let signer = trust_of(&k).verify_digest(DIGEST, &sig).unwrap();
        assert_eq!(signer.fingerprint, k.public_key().fingerprint());
        let other = trust_of(&PrivateKey::from_seed([5; 32]));
        let e = other.verify_digest(DIGEST, &sig).unwrap_err();
        assert!(matches!(e, SigningError::Untrusted { .. }), "{e}");
        let mut changed = DIGEST.to_owned();
        changed.replace_range(0..1, "1");
        let e = trust_of(&k).verify_digest(&changed, &sig).unwrap_err();
        assert!(
            matches!(e, SigningError::Invalid(SshSigError::BadSignature)),
            "{e}"
        );
        assert!(Trust::new().verify_digest(DIGEST, &sig).is_err());
    }

    #[test]
    fn a_signature_for_another_namespace_is_refused() {
        let k = PrivateKey::from_seed([4; 32]);
        let sig = k.sign("git", message(DIGEST)).to_armored();
        let e = trust_of(&k).verify_digest(DIGEST, &sig).unwrap_err();
        assert!(
            matches!(e, SigningError::Invalid(SshSigError::WrongNamespace { .. })),
            "{e}"
        );
    }

    #[test]
    fn allowed_signers_lines_are_read_as_ssh_keygen_reads_them() {
        let a = PrivateKey::from_seed([1; 32]).public_key().to_openssh();
        let b = PrivateKey::from_seed([2; 32]).public_key().to_openssh();
        let c = PrivateKey::from_seed([3; 32]).public_key().to_openssh();
        let text = format!(
            "# signers\n\nalice@example.com {a} laptop\n\"bob@x,carol@x\" namespaces=\"git,cra-*\" {b}\ndave@x namespaces=\"git\" {c}\nerin@x ssh-rsa AAAAB3NzaC1yc2E=\n"
        );
        let mut t = Trust::new();
        t.add_allowed_signers(&text, "allowed_signers").unwrap();
        assert_eq!(
            t.keys().len(),
            2,
            "dave is only for git, erin's key cannot sign atlases"
        );
        assert_eq!(t.keys()[0].principals, ["alice@example.com"]);
        assert_eq!(t.keys()[1].principals, ["bob@x", "carol@x"]);
        let e = Trust::new()
            .add_allowed_signers(&format!("x@y cert-authority {a}"), "f")
            .unwrap_err();
        assert!(
            e.to_string().contains("f:1") && e.to_string().contains("cert-authority"),
            "{e}"
        );
        assert!(Trust::new().add_allowed_signers("lonely", "f").is_err());
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*", "cra-atlas"));
        assert!(wildcard_match("cra-*", "cra-atlas"));
        assert!(wildcard_match("cra-atla?", "cra-atlas"));
        assert!(!wildcard_match("git", "cra-atlas"));
        assert!(!wildcard_match("cra-", "cra-atlas"));
    }
}

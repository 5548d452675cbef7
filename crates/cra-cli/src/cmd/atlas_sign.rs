//! `cra atlas sign` and `cra atlas verify`: an SSH signature (SSHSIG, Ed25519, namespace
//! `cra-atlas`) over the atlas digest, and its check against trusted keys
//! (`specs/atlas-signing.md`; the format is `cra_atlas::sshsig`'s).
//!
//! `sign PATH --key FILE [--out FILE]` writes the signature where a server looks for it
//! (`PATH/.atlas.sig` for a directory, `PATH.sig` for an archive) unless `--out` says otherwise.
//! `verify PATH (--trusted-key FILE... | --allowed-signers FILE) [--signature FILE]` exits 0 when
//! a trusted key signed this atlas's digest, 2 when not (unsigned, changed, another key, another
//! namespace), 1 when something could not be read, 3 when the atlas is invalid.

use std::path::{Path, PathBuf};

use clap::Args;
use cra_atlas::load::{self, LoadError};
use cra_atlas::signing::{self, Signer, SigningError, Trust};
use cra_atlas::sshsig::PrivateKey;
use serde_json::json;

use crate::exit::Exit;
use crate::output::OutputFormat;

/// Arguments of `cra atlas sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The atlas: a directory or a .atlas.tar.gz archive (it must be valid).
    pub path: PathBuf,
    /// An unencrypted OpenSSH Ed25519 private key (`ssh-keygen -t ed25519 -N '' -f FILE`).
    #[arg(long)]
    pub key: PathBuf,
    /// Where to write the signature (default: PATH/.atlas.sig for a directory, PATH.sig for an
    /// archive, where `cra serve` and `cra atlas verify` look).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write the signed `POST /v1/atlases` body for this atlas to FILE: `{manifest, files,
    /// signature}`. Its digest is the inline form's (atlas.json as compact JSON), signed on its
    /// own: it equals the directory's only when atlas.json already is that text.
    #[arg(long = "inline-body", value_name = "FILE")]
    pub inline_body: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// Arguments of `cra atlas verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The atlas: a directory or a .atlas.tar.gz archive.
    pub path: PathBuf,
    /// A file of trusted OpenSSH public keys, one per line (such as `key.pub`); repeatable.
    #[arg(long = "trusted-key", required_unless_present = "allowed_signers")]
    pub trusted_keys: Vec<PathBuf>,
    /// An `allowed_signers` file, as `ssh-keygen -Y verify -f` reads it.
    #[arg(long = "allowed-signers")]
    pub allowed_signers: Option<PathBuf>,
    /// The signature file (default: PATH/.atlas.sig for a directory, PATH.sig for an archive).
    #[arg(long)]
    pub signature: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// What signing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The atlas digest signed.
    pub digest: String,
    /// Where the signature was written.
    pub signature: PathBuf,
    /// The signing key's fingerprint.
    pub fingerprint: String,
    /// The signed inline body written (`--inline-body`): where, and the inline form's digest.
    pub inline: Option<(PathBuf, String)>,
}

/// Why a command did not succeed, with the exit code it ends with.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// Something could not be read or written (exit 1).
    #[error("{0}")]
    CouldNotRun(String),
    /// The atlas is invalid (exit 3).
    #[error("{0}")]
    InvalidAtlas(String),
    /// The signature does not hold (exit 2).
    #[error("{0}")]
    NotVerified(SigningError),
}

impl SignError {
    /// The exit code this failure ends the command with.
    pub fn exit(&self) -> Exit {
        match self {
            SignError::CouldNotRun(_) => Exit::CouldNotRun,
            SignError::InvalidAtlas(_) => Exit::InvalidAtlas,
            SignError::NotVerified(_) => Exit::Negative,
        }
    }
}

fn read_text(path: &Path, what: &str) -> Result<String, SignError> {
    std::fs::read_to_string(path).map_err(|e| {
        SignError::CouldNotRun(format!("could not read {what} {}: {e}", path.display()))
    })
}

/// The digest of the atlas at `path` (its files as read; not validated).
fn digest_of(path: &Path) -> Result<String, SignError> {
    let loaded = load::read_any(path).map(|(files, _)| cra_atlas::atlas_digest(&files));
    loaded.map_err(|e| match e {
        LoadError::Invalid { .. } => SignError::InvalidAtlas(e.to_string()),
        other => SignError::CouldNotRun(other.to_string()),
    })
}

/// `cra atlas sign` as a library function.
pub fn sign(args: &SignArgs) -> Result<Signed, SignError> {
    let key = PrivateKey::parse_openssh(&read_text(&args.key, "the key")?).map_err(|e| {
        SignError::CouldNotRun(format!(
            "the key {} cannot be used: {e}",
            args.key.display()
        ))
    })?;
    let atlas = cra_carp::atlas_check::load(&args.path).map_err(|e| match e {
        LoadError::Invalid { .. } => SignError::InvalidAtlas(e.to_string()),
        other => SignError::CouldNotRun(other.to_string()),
    })?;
    let inline = match &args.inline_body {
        Some(file) => Some((file.clone(), signed_inline_body(&atlas, &key, file)?)),
        None => None,
    };
    let digest = atlas.digest;
    let armored = signing::sign_digest(&key, &digest);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| signing::signature_path(&args.path));
    std::fs::write(&out, armored)
        .map_err(|e| SignError::CouldNotRun(format!("could not write {}: {e}", out.display())))?;
    Ok(Signed {
        digest,
        signature: out,
        fingerprint: key.public_key().fingerprint(),
        inline,
    })
}

/// Writes to `file` the `POST /v1/atlases` body of `atlas` (`{manifest, files}`, every file but
/// atlas.json as UTF-8 text) with `signature` over the digest a server computes for that body
/// (`cra_runtime::atlases::load_inline`, the server's own code); answers that digest.
fn signed_inline_body(
    atlas: &cra_atlas::LoadedAtlas,
    key: &PrivateKey,
    file: &Path,
) -> Result<String, SignError> {
    let mut files = serde_json::Map::new();
    let mut manifest = None;
    for (path, bytes) in &atlas.files {
        let text = std::str::from_utf8(bytes).map_err(|_| {
            SignError::CouldNotRun(format!(
                "{path} is not UTF-8 text, and an inline atlas carries only text: install this atlas from its directory or archive"
            ))
        })?;
        if path == load::MANIFEST_FILE {
            manifest = Some(
                serde_json::from_str::<serde_json::Value>(text)
                    .map_err(|e| SignError::InvalidAtlas(format!("atlas.json is not JSON: {e}")))?,
            );
        } else {
            files.insert(path.clone(), text.into());
        }
    }
    let mut body = json!({"manifest": manifest, "files": files});
    let inline = cra_runtime::atlases::load_inline(&body, "")
        .map_err(|e| SignError::InvalidAtlas(format!("as an inline atlas: {}", e.body.message)))?;
    body["signature"] = signing::sign_digest(key, &inline.digest).into();
    std::fs::write(file, format!("{body}\n"))
        .map_err(|e| SignError::CouldNotRun(format!("could not write {}: {e}", file.display())))?;
    Ok(inline.digest)
}

/// The trust `args` names: every key of every `--trusted-key` file and of `--allowed-signers`.
pub fn trust_of(args: &VerifyArgs) -> Result<Trust, SignError> {
    let mut trust = Trust::new();
    let bad = |e: SigningError| SignError::CouldNotRun(e.to_string());
    for file in &args.trusted_keys {
        let text = read_text(file, "the trusted key file")?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            trust
                .add_public_key(line, &format!("{}:{}", file.display(), i + 1))
                .map_err(bad)?;
        }
    }
    if let Some(file) = &args.allowed_signers {
        let text = read_text(file, "the allowed signers file")?;
        trust
            .add_allowed_signers(&text, &file.display().to_string())
            .map_err(bad)?;
    }
    if trust.is_empty() {
        return Err(SignError::CouldNotRun(
            "no Ed25519 key to trust was found in the given files: nothing could verify".to_owned(),
        ));
    }
    Ok(trust)
}

/// What verifying found: the digest and who signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The atlas digest.
    pub digest: String,
    /// The trusted key that signed it.
    pub signer: Signer,
}

/// `cra atlas verify` as a library function.
pub fn verify(args: &VerifyArgs) -> Result<Verified, SignError> {
    let trust = trust_of(args)?;
    let digest = digest_of(&args.path)?;
    let signer = match &args.signature {
        Some(file) => trust.verify_digest(&digest, &read_text(file, "the signature")?),
        None => trust.verify_at(&args.path, &digest),
    };
    match signer {
        Ok(signer) => Ok(Verified { digest, signer }),
        Err(e @ SigningError::Read { .. }) => Err(SignError::CouldNotRun(e.to_string())),
        Err(e) => Err(SignError::NotVerified(e)),
    }
}

/// Runs `cra atlas sign`.
pub fn run_sign(args: &SignArgs) -> Exit {
    match (sign(args), args.output) {
        (Ok(s), OutputFormat::Json) => {
            let mut doc = json!({
                "signed": true,
                "digest": s.digest,
                "signature": s.signature.display().to_string(),
                "key": s.fingerprint,
            });
            if let Some((file, digest)) = &s.inline {
                doc["inline_body"] = json!({"file": file.display().to_string(), "digest": digest});
            }
            println!("{doc}");
            Exit::Success
        }
        (Ok(s), OutputFormat::Text) => {
            println!("signed atlas digest {} with {}", s.digest, s.fingerprint);
            println!("wrote {}", s.signature.display());
            if let Some((file, digest)) = &s.inline {
                println!(
                    "wrote {} (inline atlas digest {digest}, signed)",
                    file.display()
                );
            }
            Exit::Success
        }
        (Err(e), output) => fail("sign", &e, output),
    }
}

/// Runs `cra atlas verify`.
pub fn run_verify(args: &VerifyArgs) -> Exit {
    match (verify(args), args.output) {
        (Ok(v), OutputFormat::Json) => {
            let doc = json!({
                "valid": true,
                "digest": v.digest,
                "key": v.signer.fingerprint,
                "principals": v.signer.principals,
            });
            println!("{doc}");
            Exit::Success
        }
        (Ok(v), OutputFormat::Text) => {
            let who = if v.signer.principals.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.signer.principals.join(", "))
            };
            println!(
                "valid: atlas digest {} signed by {}{who}",
                v.digest, v.signer.fingerprint
            );
            Exit::Success
        }
        (Err(e), output) => fail("verify", &e, output),
    }
}

fn fail(cmd: &str, e: &SignError, output: OutputFormat) -> Exit {
    if output == OutputFormat::Json {
        let outcome = if cmd == "sign" { "signed" } else { "valid" };
        let doc = json!({outcome: false, "exit": e.exit().code(), "error": e.to_string()});
        println!("{doc}");
    }
    eprintln!("cra atlas {cmd}: {e}");
    e.exit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../atlases/dev.cra.github-ops")
    }

    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }

    /// `ssh-keygen -t ed25519 -N '' -f DIR/key` (the key users make).
    fn keygen(dir: &Path) -> Option<PathBuf> {
        let path = dir.join("key");
        let ok = std::process::Command::new("ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "me@example.com",
                "-f",
            ])
            .arg(&path)
            .status()
            .ok()?
            .success();
        ok.then_some(path)
    }

    #[test]
    fn sign_then_verify_and_the_exit_codes_of_each_failure() {
        let tmp = tempfile::tempdir().unwrap();
        let atlas = tmp.path().join("atlas");
        copy(&example(), &atlas);
        let Some(key) = keygen(tmp.path()) else {
            panic!("ssh-keygen is needed for this test (OpenSSH client tools)");
        };
        let signed = sign(&SignArgs {
            path: atlas.clone(),
            key: key.clone(),
            out: None,
            inline_body: Some(tmp.path().join("body.json")),
            output: OutputFormat::Json,
        })
        .unwrap();
        // The inline body's signature holds for the digest a server computes for it.
        let body: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join("body.json")).unwrap()).unwrap();
        let inline = cra_runtime::atlases::load_inline(&body, "").unwrap();
        assert_eq!(signed.inline.as_ref().unwrap().1, inline.digest);
        let mut trust = Trust::new();
        trust
            .add_public_key(
                &std::fs::read_to_string(key.with_extension("pub")).unwrap(),
                "k",
            )
            .unwrap();
        trust
            .verify_digest(&inline.digest, body["signature"].as_str().unwrap())
            .unwrap();
        assert_eq!(signed.signature, atlas.join(".atlas.sig"));
        let args = |trusted: Vec<PathBuf>| VerifyArgs {
            path: atlas.clone(),
            trusted_keys: trusted,
            allowed_signers: None,
            signature: None,
            output: OutputFormat::Json,
        };
        let v = verify(&args(vec![key.with_extension("pub")])).unwrap();
        assert_eq!(v.digest, signed.digest);
        assert_eq!(v.signer.principals, ["me@example.com"]);

        // Another key: exit 2.
        let other_dir = tempfile::tempdir().unwrap();
        let other = keygen(other_dir.path()).unwrap();
        let e = verify(&args(vec![other.with_extension("pub")])).unwrap_err();
        assert_eq!(e.exit(), Exit::Negative, "{e}");
        // A changed atlas: exit 2.
        std::fs::write(atlas.join("context/late.md"), "late\n").unwrap();
        let e = verify(&args(vec![key.with_extension("pub")])).unwrap_err();
        assert_eq!(e.exit(), Exit::Negative, "{e}");
        // Unsigned: exit 2, saying so.
        std::fs::remove_file(atlas.join(".atlas.sig")).unwrap();
        let e = verify(&args(vec![key.with_extension("pub")])).unwrap_err();
        assert_eq!(e.exit(), Exit::Negative);
        assert!(e.to_string().contains("not signed"), "{e}");
        // An unreadable key file: exit 1.
        let e = verify(&args(vec![tmp.path().join("missing.pub")])).unwrap_err();
        assert_eq!(e.exit(), Exit::CouldNotRun);
        // Signing with a public key: exit 1 naming the key.
        let e = sign(&SignArgs {
            path: atlas.clone(),
            key: key.with_extension("pub"),
            out: None,
            inline_body: None,
            output: OutputFormat::Text,
        })
        .unwrap_err();
        assert_eq!(e.exit(), Exit::CouldNotRun);
        assert!(e.to_string().contains("key.pub"), "{e}");
    }
}

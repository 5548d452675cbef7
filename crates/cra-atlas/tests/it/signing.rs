//! Signed atlases against OpenSSH itself: what cra signs `ssh-keygen -Y verify` accepts, what
//! `ssh-keygen -Y sign` makes cra accepts, and one signature holds for a directory and its
//! archive. Needs `ssh-keygen` (OpenSSH 8.1 or later) on the PATH.

use std::path::Path;
use std::process::{Command, Stdio};

use cra_atlas::pack::pack_atlas;
use cra_atlas::signing::{self, NAMESPACE, SigningError, Trust};
use cra_atlas::sshsig::{PrivateKey, SshSigError};
use cra_atlas::{load, load_dir};

use crate::copy_fixture;

const PRINCIPAL: &str = "release@example.com";

/// `ssh-keygen -t ed25519 -N <passphrase> -f <dir>/<name>`.
fn keygen(dir: &Path, name: &str, passphrase: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args([
            "-q", "-t", "ed25519", "-N", passphrase, "-C", PRINCIPAL, "-f",
        ])
        .arg(&path)
        .output()
        .expect("ssh-keygen runs (install OpenSSH's client tools)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// `ssh-keygen -Y verify -f allowed_signers -I PRINCIPAL -n cra-atlas -s sig < message`.
fn ssh_keygen_verifies(dir: &Path, allowed: &Path, sig: &Path, message: &[u8]) -> bool {
    let msg = dir.join("message");
    std::fs::write(&msg, message).unwrap();
    let out = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-f"])
        .arg(allowed)
        .args(["-I", PRINCIPAL, "-n", NAMESPACE, "-s"])
        .arg(sig)
        .stdin(Stdio::from(std::fs::File::open(&msg).unwrap()))
        .output()
        .unwrap();
    out.status.success()
}

#[test]
fn our_signature_passes_ssh_keygen_and_holds_for_the_directory_and_its_archive() {
    let (tmp, dir) = copy_fixture("minimal");
    let atlas = load_dir(&dir).unwrap();
    let key_path = keygen(tmp.path(), "key", "");
    let key = PrivateKey::parse_openssh(&std::fs::read_to_string(&key_path).unwrap()).unwrap();
    let public = std::fs::read_to_string(key_path.with_extension("pub")).unwrap();
    assert!(
        key.public_key()
            .same_key(&cra_atlas::sshsig::PublicKey::parse_openssh(&public).unwrap())
    );

    let armored = signing::sign_digest(&key, &atlas.digest);
    let sig = signing::signature_path(&dir);
    assert_eq!(sig, dir.join(".atlas.sig"));
    std::fs::write(&sig, &armored).unwrap();

    let allowed = tmp.path().join("allowed_signers");
    std::fs::write(&allowed, format!("{PRINCIPAL} {public}")).unwrap();
    assert!(ssh_keygen_verifies(
        tmp.path(),
        &allowed,
        &sig,
        atlas.digest.as_bytes()
    ));
    let mut other = atlas.digest.clone();
    other.replace_range(0..1, if other.starts_with('0') { "1" } else { "0" });
    assert!(!ssh_keygen_verifies(
        tmp.path(),
        &allowed,
        &sig,
        other.as_bytes()
    ));

    // The signature file is outside the digest, and the archive's signature beside it is the
    // same text.
    assert_eq!(load_dir(&dir).unwrap().digest, atlas.digest);
    let archive = tmp.path().join("minimal.atlas.tar.gz");
    pack_atlas(&atlas, &archive).unwrap();
    std::fs::write(signing::signature_path(&archive), &armored).unwrap();
    let mut trust = Trust::new();
    trust
        .add_allowed_signers(
            &std::fs::read_to_string(&allowed).unwrap(),
            "allowed_signers",
        )
        .unwrap();
    let signer = trust.verify_at(&dir, &atlas.digest).unwrap();
    assert_eq!(signer.principals, [PRINCIPAL]);
    let from_archive = load(&archive).unwrap();
    trust.verify_at(&archive, &from_archive.digest).unwrap();

    // An edit changes the digest: the old signature no longer holds.
    std::fs::write(dir.join("context/extra.md"), "late edit\n").unwrap();
    let edited = load_dir(&dir).unwrap();
    let e = trust.verify_at(&dir, &edited.digest).unwrap_err();
    assert!(
        matches!(e, SigningError::Invalid(SshSigError::BadSignature)),
        "{e}"
    );
    std::fs::remove_file(&sig).unwrap();
    assert!(
        trust
            .verify_at(&dir, &edited.digest)
            .unwrap_err()
            .is_unsigned()
    );
}

#[test]
fn a_signature_made_by_ssh_keygen_passes_our_verifier() {
    let (tmp, dir) = copy_fixture("minimal");
    let atlas = load_dir(&dir).unwrap();
    let key_path = keygen(tmp.path(), "key", "");
    let msg = tmp.path().join("digest");
    std::fs::write(&msg, &atlas.digest).unwrap();
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", NAMESPACE, "-f"])
        .arg(&key_path)
        .arg(&msg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let armored = std::fs::read_to_string(tmp.path().join("digest.sig")).unwrap();
    let mut trust = Trust::new();
    let public = std::fs::read_to_string(key_path.with_extension("pub")).unwrap();
    trust.add_public_key(&public, "key.pub").unwrap();
    trust.verify_digest(&atlas.digest, &armored).unwrap();

    // Signed for another namespace: refused.
    let other = tmp.path().join("for-files");
    std::fs::write(&other, &atlas.digest).unwrap();
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", "file", "-f"])
        .arg(&key_path)
        .arg(&other)
        .output()
        .unwrap();
    assert!(out.status.success());
    let armored = std::fs::read_to_string(tmp.path().join("for-files.sig")).unwrap();
    let e = trust.verify_digest(&atlas.digest, &armored).unwrap_err();
    assert!(e.to_string().contains("namespace"), "{e}");
}

#[test]
fn an_encrypted_key_is_refused_with_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let key_path = keygen(tmp.path(), "locked", "a passphrase");
    let e = PrivateKey::parse_openssh(&std::fs::read_to_string(&key_path).unwrap()).unwrap_err();
    assert!(matches!(e, SshSigError::EncryptedKey(_)), "{e}");
    assert!(e.to_string().contains("unencrypted"), "{e}");
}

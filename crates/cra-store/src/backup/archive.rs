//! The backup archive: a tar file whose entries are the store's files, then `MANIFEST.json`,
//! written last. [`Writer`] builds it as `<out>.partial` and renames it to `<out>` only once the
//! manifest is durable; [`Archive::open`] refuses an archive whose last entry is not the
//! manifest, or whose entries do not match the manifest's sizes and SHA-256 digests.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{BackupError, Manifest, ManifestEntry};

/// The manifest's entry name: always the last entry.
pub const MANIFEST: &str = "MANIFEST.json";

/// The path a backup is built at before it is whole.
pub fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

fn io(path: &Path, e: &std::io::Error) -> BackupError {
    BackupError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// The SHA-256 (hex) and length of the file at `path`.
fn digest_file(path: &Path) -> Result<(String, u64), BackupError> {
    let mut file = File::open(path).map_err(|e| io(path, &e))?;
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut file, &mut hasher).map_err(|e| io(path, &e))?;
    Ok((format!("{:x}", hasher.finalize()), bytes))
}

/// An archive being written.
pub struct Writer {
    out: PathBuf,
    partial: PathBuf,
    tar: tar::Builder<File>,
    entries: Vec<ManifestEntry>,
}

impl Writer {
    /// Starts `<out>.partial`; refuses when `out` exists (a backup never replaces a file).
    pub fn create(out: &Path) -> Result<Self, BackupError> {
        if out.exists() {
            return Err(BackupError::Exists(out.to_path_buf()));
        }
        let partial = partial_path(out);
        let file = File::create(&partial).map_err(|e| io(&partial, &e))?;
        let mut tar = tar::Builder::new(file);
        tar.mode(tar::HeaderMode::Deterministic);
        Ok(Self {
            out: out.to_path_buf(),
            partial,
            tar,
            entries: Vec::new(),
        })
    }

    /// Adds the file at `path` as entry `name`, with its digest in the manifest.
    pub fn add_file(&mut self, name: &str, path: &Path) -> Result<(), BackupError> {
        let (sha256, bytes) = digest_file(path)?;
        let mut file = File::open(path).map_err(|e| io(path, &e))?;
        self.tar
            .append_file(name, &mut file)
            .map_err(|e| io(&self.partial, &e))?;
        self.entries.push(ManifestEntry {
            name: name.to_owned(),
            bytes,
            sha256,
        });
        Ok(())
    }

    /// Writes `manifest` (with the entries added) as the last entry, makes the archive durable
    /// and renames it to its name. Answers the manifest written.
    pub fn finish(mut self, mut manifest: Manifest) -> Result<Manifest, BackupError> {
        manifest.entries = std::mem::take(&mut self.entries);
        let text = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| BackupError::Damaged(e.to_string()))?;
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        let partial = self.partial.clone();
        self.tar
            .append_data(&mut header, MANIFEST, text.as_slice())
            .map_err(|e| io(&partial, &e))?;
        let file = self.tar.into_inner().map_err(|e| io(&partial, &e))?;
        file.sync_all().map_err(|e| io(&partial, &e))?;
        if self.out.exists() {
            return Err(BackupError::Exists(self.out));
        }
        std::fs::rename(&partial, &self.out).map_err(|e| io(&self.out, &e))?;
        let dir = self.out.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io(dir, &e))?;
        }
        Ok(manifest)
    }
}

/// A whole archive, checked against its manifest.
#[derive(Debug)]
pub struct Archive {
    path: PathBuf,
    /// What the archive says it holds.
    pub manifest: Manifest,
}

impl Archive {
    /// Where the archive is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the archive at `path` through once: its last entry must be the manifest, and every
    /// other entry one the manifest lists, with the listed size and digest.
    pub fn open(path: &Path) -> Result<Self, BackupError> {
        let file = File::open(path).map_err(|e| io(path, &e))?;
        let mut tar = tar::Archive::new(file);
        // The file opened, so what fails now is its form: an archive that ends inside an
        // entry was cut short (a partial backup; `tar` says so only in words), anything else
        // is damaged.
        let read = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof || e.to_string().contains("EOF") {
                BackupError::Partial(path.to_path_buf())
            } else {
                BackupError::Damaged(e.to_string())
            }
        };
        let mut found: Vec<ManifestEntry> = Vec::new();
        let mut manifest: Option<Manifest> = None;
        for entry in tar.entries().map_err(read)? {
            let mut entry = entry.map_err(read)?;
            let name = entry
                .path()
                .map_err(|e| io(path, &e))?
                .to_string_lossy()
                .into_owned();
            if manifest.is_some() {
                return Err(BackupError::Damaged(format!(
                    "entry {name} follows the manifest, which a backup writes last"
                )));
            }
            if name == MANIFEST {
                let mut text = Vec::new();
                entry.read_to_end(&mut text).map_err(read)?;
                manifest = Some(serde_json::from_slice(&text).map_err(|e| {
                    BackupError::Damaged(format!("the manifest is not readable: {e}"))
                })?);
                continue;
            }
            let mut hasher = Sha256::new();
            let bytes = std::io::copy(&mut entry, &mut hasher).map_err(read)?;
            found.push(ManifestEntry {
                name,
                bytes,
                sha256: format!("{:x}", hasher.finalize()),
            });
        }
        let manifest = manifest.ok_or(BackupError::Partial(path.to_path_buf()))?;
        manifest.check_format()?;
        if found != manifest.entries {
            return Err(BackupError::Damaged(
                "its entries are not the ones its manifest lists (a name, size or SHA-256 \
                 differs)"
                    .into(),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            manifest,
        })
    }

    /// Calls `each` with every entry but the manifest, in archive order, as a reader.
    pub fn for_each(
        &self,
        each: &mut dyn FnMut(&str, &mut dyn Read) -> Result<(), BackupError>,
    ) -> Result<(), BackupError> {
        let file = File::open(&self.path).map_err(|e| io(&self.path, &e))?;
        let mut tar = tar::Archive::new(file);
        for entry in tar.entries().map_err(|e| io(&self.path, &e))? {
            let mut entry = entry.map_err(|e| io(&self.path, &e))?;
            let name = entry
                .path()
                .map_err(|e| io(&self.path, &e))?
                .to_string_lossy()
                .into_owned();
            if name != MANIFEST {
                each(&name, &mut entry)?;
            }
        }
        Ok(())
    }

    /// Writes entry `name` to the new file `to`, made durable.
    pub fn extract(&self, name: &str, to: &Path) -> Result<(), BackupError> {
        let file = File::open(&self.path).map_err(|e| io(&self.path, &e))?;
        let mut tar = tar::Archive::new(file);
        for entry in tar.entries().map_err(|e| io(&self.path, &e))? {
            let mut entry = entry.map_err(|e| io(&self.path, &e))?;
            if entry
                .path()
                .map_err(|e| io(&self.path, &e))?
                .to_string_lossy()
                != name
            {
                continue;
            }
            let mut out = File::create_new(to).map_err(|e| io(to, &e))?;
            std::io::copy(&mut entry, &mut out).map_err(|e| io(to, &e))?;
            out.flush().map_err(|e| io(to, &e))?;
            out.sync_all().map_err(|e| io(to, &e))?;
            return Ok(());
        }
        Err(BackupError::Damaged(format!("it has no entry {name}")))
    }
}

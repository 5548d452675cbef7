//! Packed atlases: deterministic `.atlas.tar.gz` archives, and a reader that refuses hostile ones.
//!
//! Writing (see `specs/atlas.md`, "Pack format"): one tar entry per file of the atlas (no
//! directory entries), in path byte order, paths relative to the atlas root without a `./`
//! prefix; GNU headers (long paths use the GNU long-name entry), mode `0644`, mtime 0, uid and gid
//! 0, empty owner names; gzip with mtime 0, no file name, OS byte 255, compression level 9. The
//! same files therefore always give the same bytes (with one build of `flate2`).
//!
//! Reading refuses: links and special files, absolute paths, `..` segments, paths that are not
//! printable ASCII or longer than [`MAX_PATH_BYTES`], duplicate entries, and archives over the
//! [`Limits`]. The limits also bound the decompressed stream as a whole ([`inflate_budget`]),
//! so bytes the reader never keeps (skipped entries, GNU long names and pax headers, which the
//! tar reader buffers whole) cannot make it inflate or allocate without bound. A leading `./` and
//! directory entries are accepted (archives made with `tar -C dir .`); hidden entries are skipped
//! exactly as the directory reader skips them, so an archive and its directory give one digest.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use cra_wire::hash::sha256_hex;
use flate2::{Compression, GzBuilder, read::GzDecoder};

use crate::load::{Limits, LoadError, LoadedAtlas, is_portable_path};

/// The outcome of packing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackReport {
    /// SHA-256 of the archive bytes, lowercase hex.
    pub archive_sha256: String,
    /// The atlas digest (independent of tar and gzip).
    pub atlas_digest: String,
    /// Size of the archive in bytes.
    pub bytes: u64,
}

/// The archive bytes for a set of files (module documentation).
pub fn pack_files(files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<Vec<u8>> {
    let gz = GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), Compression::new(9));
    let mut builder = tar::Builder::new(gz);
    builder.mode(tar::HeaderMode::Deterministic);
    for (path, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("")?;
        header.set_groupname("")?;
        builder.append_data(&mut header, path, bytes.as_slice())?;
    }
    let mut gz = builder.into_inner()?;
    gz.flush()?;
    gz.finish()
}

/// Packs a loaded (hence valid) atlas into `out`.
pub fn pack_atlas(atlas: &LoadedAtlas, out: &Path) -> Result<PackReport, LoadError> {
    let io = |source| LoadError::Io {
        path: out.to_owned(),
        source,
    };
    let bytes = pack_files(&atlas.files).map_err(io)?;
    // Write next to the target and rename, so a reader never sees half an archive.
    let tmp = out.with_extension("tmp-pack");
    fs::write(&tmp, &bytes).map_err(io)?;
    fs::rename(&tmp, out).map_err(io)?;
    Ok(PackReport {
        archive_sha256: sha256_hex(&bytes),
        atlas_digest: atlas.digest.clone(),
        bytes: bytes.len() as u64,
    })
}

/// Reads the files of an archive at `path` (module documentation for what is refused).
pub fn read_archive(path: &Path, limits: Limits) -> Result<BTreeMap<String, Vec<u8>>, LoadError> {
    let file = fs::File::open(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    read_archive_from(file, limits).map_err(|message| LoadError::BadArchive {
        path: path.to_owned(),
        message,
    })
}

/// Longest entry path accepted, in bytes (what a directory on Linux can hold, `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// How many decompressed bytes an archive within `limits` can need: the files, plus for every
/// entry the reader may visit a header, its padding and a GNU long name of up to
/// [`MAX_PATH_BYTES`], plus the end-of-archive blocks.
pub fn inflate_budget(limits: Limits) -> u64 {
    let entries = (limits.max_files as u64)
        .saturating_mul(2)
        .saturating_add(1);
    let per_entry = 512 + 511 + 512 + MAX_PATH_BYTES as u64 + 511;
    limits
        .max_total_bytes
        .saturating_add(entries.saturating_mul(per_entry))
        .saturating_add(1024)
}

/// A reader that fails once more than `left` bytes have been read from it.
struct Budget<R> {
    inner: R,
    left: u64,
    budget: u64,
}

impl<R: Read> Read for Budget<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // Only the end of the stream may follow.
            let mut one = [0u8; 1];
            return match self.inner.read(&mut one)? {
                0 => Ok(0),
                _ => Err(io::Error::other(format!(
                    "it inflates to more than {} bytes uncompressed, more than its limits allow",
                    self.budget
                ))),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left = self.left.saturating_sub(n as u64);
        Ok(n)
    }
}

/// Reads the files of a gzip-compressed tar stream; the error says why it was refused.
pub fn read_archive_from<R: Read>(
    reader: R,
    limits: Limits,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let budget = inflate_budget(limits);
    let mut archive = tar::Archive::new(Budget {
        inner: GzDecoder::new(reader),
        left: budget,
        budget,
    });
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    let entries = archive
        .entries()
        .map_err(|e| format!("not a gzip-compressed tar archive: {e}"))?;
    for (index, entry) in entries.enumerate() {
        if index > limits.max_files * 2 {
            return Err(format!("more than {} entries", limits.max_files * 2));
        }
        let mut entry = entry.map_err(|e| format!("corrupt archive: {e}"))?;
        let raw = entry.path_bytes().into_owned();
        if raw.len() > MAX_PATH_BYTES {
            return Err(format!(
                "an entry path is {} bytes long, more than {MAX_PATH_BYTES}",
                raw.len()
            ));
        }
        let name = String::from_utf8(raw).map_err(|_| {
            "an entry path is not UTF-8 (atlas paths are printable ASCII)".to_owned()
        })?;
        let kind = entry.header().entry_type();
        let trimmed = name.strip_prefix("./").unwrap_or(&name);
        let trimmed = trimmed.trim_end_matches('/');
        if name.starts_with('/') || name.split('/').any(|s| s == "..") {
            return Err(format!(
                "entry `{name}` escapes the atlas root (absolute or `..` path)"
            ));
        }
        if kind.is_dir() {
            continue;
        }
        if !(kind.is_file() || kind == tar::EntryType::Continuous) {
            return Err(format!(
                "entry `{name}` is a link or special file: atlases hold only regular files"
            ));
        }
        if trimmed.split('/').any(|s| s.starts_with('.')) {
            continue;
        }
        if !is_portable_path(trimmed) {
            return Err(format!("entry `{name}` is not a portable relative path"));
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| format!("corrupt header: {e}"))?;
        if size > limits.max_file_bytes {
            return Err(format!(
                "entry `{name}` has {size} bytes, more than the limit of {}",
                limits.max_file_bytes
            ));
        }
        total += size;
        if total > limits.max_total_bytes || files.len() >= limits.max_files {
            return Err(format!(
                "the archive holds more than {} files or {} bytes",
                limits.max_files, limits.max_total_bytes
            ));
        }
        let mut bytes = Vec::new();
        (&mut entry)
            .take(limits.max_file_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("corrupt entry `{name}`: {e}"))?;
        if bytes.len() as u64 != size {
            return Err(format!("entry `{name}` is truncated"));
        }
        if files.insert(trimmed.to_owned(), bytes).is_some() {
            return Err(format!("entry `{trimmed}` appears twice"));
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BTreeMap<String, Vec<u8>> {
        let mut files = BTreeMap::new();
        files.insert("atlas.json".to_owned(), b"{}".to_vec());
        files.insert(
            format!("context/{}.md", "long-name-".repeat(15)),
            b"# Long\n".to_vec(),
        );
        files.insert("context/a.md".to_owned(), b"# A\n".to_vec());
        files
    }

    #[test]
    fn packing_is_deterministic_and_round_trips() {
        let a = pack_files(&sample()).unwrap();
        let b = pack_files(&sample()).unwrap();
        assert_eq!(a, b);
        // gzip header: magic, deflate, no flags, mtime 0, OS 255.
        assert_eq!(&a[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255]);
        let back = read_archive_from(a.as_slice(), Limits::default()).unwrap();
        assert_eq!(back, sample());
    }

    fn raw_archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        let tar_bytes = b.into_inner().unwrap();
        let mut gz = GzBuilder::new().write(Vec::new(), Compression::fast());
        gz.write_all(&tar_bytes).unwrap();
        gz.finish().unwrap()
    }

    fn file_header(size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_size(size);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h
    }

    #[test]
    fn hostile_archives_are_refused() {
        // `..` path, written raw into the header (the builder itself refuses it).
        let dotdot = raw_archive(|b| {
            let mut h = file_header(1);
            h.as_old_mut().name[..9].copy_from_slice(b"../x.json");
            h.set_cksum();
            b.append(&h, &b"x"[..]).unwrap();
        });
        let err = read_archive_from(dotdot.as_slice(), Limits::default()).unwrap_err();
        assert!(err.contains("escapes"), "{err}");

        let absolute = raw_archive(|b| {
            let mut h = file_header(1);
            h.as_old_mut().name[..7].copy_from_slice(b"/etc/pw");
            h.set_cksum();
            b.append(&h, &b"x"[..]).unwrap();
        });
        let err = read_archive_from(absolute.as_slice(), Limits::default()).unwrap_err();
        assert!(err.contains("escapes"), "{err}");

        let link = raw_archive(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "atlas.json", "/etc/passwd").unwrap();
        });
        let err = read_archive_from(link.as_slice(), Limits::default()).unwrap_err();
        assert!(err.contains("link"), "{err}");

        let big = raw_archive(|b| {
            let mut h = file_header(2048);
            b.append_data(&mut h, "context/big.md", &[b'a'; 2048][..])
                .unwrap();
        });
        let limits = Limits {
            max_file_bytes: 1024,
            ..Limits::default()
        };
        let err = read_archive_from(big.as_slice(), limits).unwrap_err();
        assert!(err.contains("limit"), "{err}");

        let dup = raw_archive(|b| {
            for _ in 0..2 {
                let mut h = file_header(1);
                b.append_data(&mut h, "a.md", &b"x"[..]).unwrap();
            }
        });
        let err = read_archive_from(dup.as_slice(), Limits::default()).unwrap_err();
        assert!(err.contains("twice"), "{err}");

        let err = read_archive_from(&b"not gzip"[..], Limits::default()).unwrap_err();
        assert!(!err.is_empty());
    }
}

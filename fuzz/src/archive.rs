//! Packed `.atlas.tar.gz` archives (`cra_atlas::pack::read_archive_from`).
//!
//! Input: the first byte picks the form of the rest: gzip bytes as received, or tar bytes that
//! the harness gzips first (so the fuzzer works on tar headers directly).
//!
//! Oracles: a read succeeds only with portable, non-hidden paths within the limits; packing what
//! was read reads back the same files; loading the files never panics.

use std::io::Write;
use std::path::Path;

use cra_atlas::load::{Limits, is_portable_path};
use cra_atlas::pack::{pack_files, read_archive_from};

/// Limits small enough that the fuzzer can reach every one of them.
pub const FUZZ_LIMITS: Limits = Limits {
    max_files: 16,
    max_file_bytes: 4096,
    max_total_bytes: 16384,
};

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = gz.write_all(bytes);
    gz.finish().unwrap_or_default()
}

/// A packed atlas, as gzip bytes or as tar bytes gzipped here.
pub fn atlas_archive(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let archive = if first % 2 == 0 {
        rest.to_vec()
    } else {
        gzip(rest)
    };
    let files = match read_archive_from(archive.as_slice(), FUZZ_LIMITS) {
        Ok(f) => f,
        Err(message) => {
            assert!(!message.is_empty(), "a refusal without a reason");
            return;
        }
    };
    assert!(files.len() <= FUZZ_LIMITS.max_files, "too many files read");
    let total: u64 = files.values().map(|b| b.len() as u64).sum();
    assert!(total <= FUZZ_LIMITS.max_total_bytes, "too many bytes read");
    for (p, b) in &files {
        assert!(is_portable_path(p), "unportable path {p:?} read");
        assert!(
            !p.split('/').any(|s| s.starts_with('.')),
            "hidden path {p:?} read"
        );
        assert!(b.len() as u64 <= FUZZ_LIMITS.max_file_bytes, "file too big");
    }
    let packed = match pack_files(&files) {
        Ok(p) => p,
        Err(e) => panic!("packing what was read failed: {e}"),
    };
    match read_archive_from(packed.as_slice(), FUZZ_LIMITS) {
        Ok(back) => assert_eq!(back, files, "pack/read round trip changed the files"),
        Err(e) => panic!("our own archive is refused: {e}"),
    }
    let _ = cra_atlas::load::from_files(Path::new("fuzz.atlas.tar.gz"), files);
}

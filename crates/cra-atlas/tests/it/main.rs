//! Integration tests of `cra-atlas`: loading, registry, packing, provider adapters, and signed
//! atlases checked against `ssh-keygen` itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod adapters;
mod fuzz_props;
mod hostile;
mod load;
mod pack;
mod registry;
mod signing;

use std::path::PathBuf;

/// A fixture directory of this crate.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copies a fixture into a fresh temporary directory (for tests that edit files).
pub fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join(name);
    copy_dir(&fixture(name), &dst);
    (tmp, dst)
}

fn copy_dir(src: &std::path::Path, dst: &std::path::Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

//! Paths and copies the command modules' unit tests share: the repository's files, and an atlas
//! copied into a temporary directory to change.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// `rel` under the repository's root.
pub(crate) fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Copies the directory tree `from` to `to`.
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

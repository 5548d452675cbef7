//! Packing: determinism, and archive/directory digest equality.

use cra_atlas::pack::{pack_atlas, pack_files};
use cra_atlas::{load, load_dir};

use crate::{copy_fixture, fixture};

#[test]
fn packing_twice_gives_identical_bytes_and_the_archive_loads_with_the_same_digest() {
    let atlas = load_dir(&fixture("minimal")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.atlas.tar.gz");
    let b = tmp.path().join("b.atlas.tar.gz");
    let ra = pack_atlas(&atlas, &a).unwrap();
    let rb = pack_atlas(&atlas, &b).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(ra, rb);
    assert_eq!(ra.atlas_digest, atlas.digest);
    let from_archive = load(&a).unwrap();
    assert_eq!(from_archive.digest, atlas.digest);
    assert_eq!(from_archive.manifest, atlas.manifest);
}

#[test]
fn a_copy_with_other_mtimes_packs_to_the_same_bytes() {
    let (_tmp, dir) = copy_fixture("minimal");
    let original = pack_files(&load_dir(&fixture("minimal")).unwrap().files).unwrap();
    let copied = pack_files(&load_dir(&dir).unwrap().files).unwrap();
    assert_eq!(original, copied);
}

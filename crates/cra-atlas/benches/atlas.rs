//! Benchmarks of the atlas hot paths: loading and validating an atlas (what a reload costs),
//! policy pattern matching (CARP calls it per policy and action), packing, and range
//! resolution in a registry holding many versions.
//!
//! Run: `cargo bench -p cra-atlas --bench atlas`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::{Path, PathBuf};

use cra_atlas::pack::pack_files;
use cra_atlas::{Registry, load_dir, pattern};
use criterion::{Criterion, criterion_group, criterion_main};

fn payments() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../atlases/com.example.payments")
}

fn benches(c: &mut Criterion) {
    let dir = payments();
    c.bench_function("load_dir(com.example.payments)", |b| {
        b.iter(|| black_box(load_dir(&dir).unwrap()))
    });

    let atlas = load_dir(&dir).unwrap();
    c.bench_function("pack_files(com.example.payments)", |b| {
        b.iter(|| black_box(pack_files(&atlas.files).unwrap()))
    });

    let ids: Vec<&str> = atlas
        .manifest
        .actions
        .iter()
        .map(|a| a.action_id.as_str())
        .collect();
    let patterns = [
        "payment.create",
        "payout.*",
        "payout.**",
        "**.get",
        "*",
        "a.**.z",
    ];
    c.bench_function("pattern::matches (6 patterns x 11 ids)", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for p in patterns {
                for id in &ids {
                    n += usize::from(pattern::matches(black_box(p), black_box(id)));
                }
            }
            n
        })
    });

    let registry = Registry::new();
    for minor in 0..100 {
        let mut a = atlas.clone();
        a.manifest.version = format!("2.{minor}.0");
        a.source = PathBuf::from(format!("v{minor}"));
        registry.insert(a).unwrap();
    }
    c.bench_function("registry.resolve(^2.40, 100 versions)", |b| {
        b.iter(|| black_box(registry.resolve("com.example.payments", "~2.40").unwrap()))
    });
}

criterion_group!(atlas, benches);
criterion_main!(atlas);

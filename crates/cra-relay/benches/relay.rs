//! Relay hot paths: content hashing (canonical JSON + SHA-256), a full deposit (validation,
//! hash, insert) on the in-memory test store, and rendering an export of 1,000 packages and
//! 1,000 facts. Run: `cargo bench -p cra-relay`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;

use cra_relay::store::RelayStore;
use cra_relay::store::memory::MemoryStore;
use cra_relay::testkit;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

fn rich_package(id: &str) -> serde_json::Value {
    let mut p = testkit::package(id, "complete");
    p["content_md"] = json!("Paragraph about the retrieval index and its latency. ".repeat(40));
    p["tags"] = json!(["retrieval", "latency", "q2"]);
    p["deliverables"] = json!([{"path": "docs/a.md", "type": "md", "size_bytes": 18432}]);
    p["x-trust-score"] = json!(0.93);
    p
}

fn benches(c: &mut Criterion) {
    let value = rich_package("pkg_bench");
    let package = cra_relay::validate::validate_package(&value).unwrap();
    let mut g = c.benchmark_group("relay");
    g.throughput(Throughput::Elements(1));
    g.bench_function("content_hash_2kb_package", |b| {
        b.iter(|| package.content_hash().unwrap())
    });
    g.bench_function("validate_and_hash", |b| {
        b.iter(|| {
            cra_relay::validate::validate_package(&value)
                .unwrap()
                .content_hash()
                .unwrap()
        })
    });
    let store: Arc<dyn RelayStore> = Arc::new(MemoryStore::new());
    let (relay, _) = testkit::relay(store);
    relay.create_project(testkit::PROJECT, "bench").unwrap();
    let mut n = 0u64;
    g.bench_function("deposit_memory_store", |b| {
        b.iter(|| {
            n += 1;
            relay
                .deposit(
                    testkit::PROJECT,
                    &testkit::jordan(),
                    &rich_package(&format!("pkg_{n}")),
                )
                .unwrap()
        })
    });
    let (r, clock) = testkit::relay(Arc::new(MemoryStore::new()));
    testkit::populate(&r, &clock, 1000, 1000);
    let snap = r.store().snapshot().unwrap();
    g.throughput(Throughput::Elements(2000));
    g.bench_function("export_render_1k_packages_1k_facts", |b| {
        b.iter(|| cra_relay::export::render(&snap).unwrap())
    });
    g.finish();
}

criterion_group!(relay, benches);
criterion_main!(relay);

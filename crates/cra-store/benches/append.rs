//! Durable append throughput (placeholder until the benchmark lands).
fn main() {}

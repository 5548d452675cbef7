//! Integration tests of the runtime: a real server on 127.0.0.1:0 over a fresh data directory
//! per test, driven with `reqwest` (HTTP) and `tokio-tungstenite` (WebSocket).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod atlas_governance;
mod authz;
mod bad_requests;
mod catalog;
mod concurrency;
mod connections;
mod console;
mod crash;
mod disk;
mod fidelity;
mod flow;
mod history;
mod hostile;
mod inflight;
mod keys;
mod mcp_pool;
mod openapi;
mod otlp;
mod outbox;
mod params;
mod quotas;
mod relay;
mod service;
mod sessions;
mod signing;
mod stream;
mod support;
mod system;
mod tamper;
mod tlog;
mod tls;
mod watch;
mod webhooks;

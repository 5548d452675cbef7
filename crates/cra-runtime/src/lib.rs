//! `cra-runtime`: composes the protocol crates into the server agents, operators and auditors
//! talk to (axum HTTP API, WebSocket trace streams, auth, executors).
//!
//! * [`config`]: `cra serve` configuration (TOML + flags).
//! * [`auth`]: API keys and JWTs to actors with roles; [`credentials`]: the ones in force,
//!   reloaded without a restart (SIGHUP, a file watch) and every change recorded.
//! * `error`, `extract`: the one error body and the extractors that produce it.
//! * `ratelimit`, `metrics`: per-key limits and Prometheus counters.
//! * `routes`: the HTTP API; [`openapi`]: its generated description.
//! * [`server`]: start-up, binding and graceful shutdown; [`state`]: the shared [`Runtime`];
//!   `backend`: the store behind each trait.
//! * [`service`]: the governance core, one typed operation per use, with no HTTP in it.
//! * [`atlases`]: the atlases in force, swapped whole on reload or install.
//! * [`executor`]: the executors allowed actions run through; `inflight`: an execution's
//!   lease until its outcome is recorded, and the start-up recovery of interrupted ones.
//! * `tracelog`: TRACE appends and the live fan-out; `stream`: the WebSocket streams;
//!   `replicas`: other replicas' appends published to this one's streams (PostgreSQL);
//!   `leader`: which replica runs the periodic work.
//! * `listen`: the accept loop and each connection's HTTP/1, under header, write and shutdown
//!   deadlines and a connection limit that half-open clients cannot fill.
//! * [`conformance`]: the conformance suite's evaluation verbs.
//! * [`tlog`]: the transparency log's key, origin and checkpoints (`/v1/log/*`).
//! * [`tls`]: HTTPS and WSS for the server (mutual TLS's certificate identity too) and the one
//!   rustls configuration of every client cra builds.
//! * [`webhooks`]: approver notifications, signed as Standard Webhooks sign, retried, recorded.
//! * `console`: the operator's web console at `/console`, files compiled in.
//! * [`otlp`]: OpenTelemetry export, a span per operation from the appended events.
//! * [`mcp`]: the MCP front door, a CARP session served as MCP tools (`specs/mcp.md`).

pub mod atlases;
pub mod auth;
mod backend;
pub mod config;
pub mod conformance;
mod console;
pub mod credentials;
mod error;
pub mod executor;
mod extract;
mod inflight;
mod leader;
mod listen;
pub mod mcp;
mod metrics;
pub mod openapi;
pub mod otlp;
mod ratelimit;
mod replicas;
mod routes;
pub mod server;
pub mod service;
pub mod state;
mod stream;
pub mod tlog;
pub mod tls;
mod tracelog;
pub mod webhooks;

pub use backend::Backends;
pub use config::{ClockSource, RuntimeConfig};
pub use error::{ApiError, ApiResult};
pub use inflight::close_interrupted;
pub use routes::router;
pub use server::{RunningServer, StartNotice, build_runtime, open_local, open_local_with, start};
pub use state::{AppState, Runtime};
pub use stream::{
    BEARER_PROTOCOL_PREFIX, CLOSE_MAY_HAVE_MISSED, CLOSE_SLOW_CONSUMER, STREAM_PROTOCOL,
};
pub use tracelog::StreamFilter;

//! `cra-runtime`: composes the protocol crates into the server agents, operators and auditors
//! talk to (axum HTTP API, WebSocket trace streams, auth, executors).
//!
//! * [`config`]: `cra serve` configuration (TOML + flags).
//! * [`auth`]: API keys and JWTs to actors with roles.
//! * [`error`], [`extract`]: the one error body and the extractors that produce it.
//! * [`ratelimit`], [`metrics`]: per-key limits and Prometheus counters.
//! * [`routes`]: the HTTP API; [`openapi`]: its generated description.
//! * [`server`]: start-up, binding and graceful shutdown.

pub mod atlases;
pub mod auth;
pub mod backend;
pub mod config;
pub mod conformance;
pub mod error;
pub mod executor;
pub mod extract;
pub mod inflight;
pub mod metrics;
pub mod openapi;
pub mod ratelimit;
pub mod routes;
pub mod server;
pub mod service;
pub mod state;
pub mod stream;
pub mod tracelog;

pub use config::RuntimeConfig;
pub use error::{ApiError, ApiResult};
pub use server::{RunningServer, StartNotice, build_runtime, start};
pub use state::{AppState, Runtime};

//! `cra-runtime`: composes the protocol crates into the server agents, operators and auditors
//! talk to (axum HTTP API, WebSocket trace streams, auth, executors).

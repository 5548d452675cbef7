//! Integration tests of the `cra` commands, called as library functions; one module per group.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod approvals;
mod atlas;
mod atlas_differential;
mod conventions;
mod keys;
mod log;
mod mcp;
mod mcp_http;
mod packaging;
mod readme;
mod relay;
mod replicas;
mod serve;
mod session;
mod trace;
mod witness;

/// A GET with cra's client configuration (`reqwest::blocking::get` builds a client without
/// one, which panics: `clippy.toml`).
fn http_get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::blocking::Response> {
    cra_runtime::tls::blocking_http_client()
        .build()?
        .get(url)
        .send()
}

/// Sends SIGTERM to `child` (a `cra` server process) and requires a clean exit.
fn terminate(child: std::process::Child) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

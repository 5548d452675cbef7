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
mod backup;
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
mod upgrade;
mod witness;

/// A GET with cra's client configuration (`reqwest::blocking::get` builds a client without
/// one, which panics: `clippy.toml`).
fn http_get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::blocking::Response> {
    cra_runtime::tls::blocking_http_client()
        .build()?
        .get(url)
        .send()
}

/// A child process killed when the test ends early (a failed assertion), so none outlives it.
struct Reaped(Option<std::process::Child>);

impl Reaped {
    fn new(child: std::process::Child) -> Self {
        Self(Some(child))
    }

    /// The child, still reaped here.
    fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("a child until taken")
    }

    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }

    /// The child, no longer reaped here (to stop it gracefully).
    fn take(mut self) -> std::process::Child {
        self.0.take().expect("a child until taken")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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

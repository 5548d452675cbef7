//! What the commands that call a running server share: where the server is and who asks
//! ([`ServerArgs`]), the address they default to, the credential they fall back to, one JSON
//! call ([`call`]), the TLS flags every command takes, and the percent-encoding of path segments
//! and query values.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::Value;

use crate::output::OutputFormat;

/// `cra serve`'s default address, where a command without `--url` (or `CRA_URL`) looks.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8421";

/// The token given (by a flag or `CRA_TOKEN`), else the admin key a local server wrote into
/// `./cra-data`; `None` when there is neither.
pub fn token_or_local(given: Option<String>) -> Option<String> {
    given.or_else(|| cra_runtime::auth::local_admin_token(Path::new("./cra-data")))
}

/// Where the server is and who is asking.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The server (default: $CRA_URL or http://127.0.0.1:8421).
    #[arg(long, env = "CRA_URL")]
    pub url: Option<String>,
    /// Bearer token (default: $CRA_TOKEN, else the admin key of ./cra-data).
    #[arg(long, env = "CRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// Why a call did not give an answer.
#[derive(Debug)]
pub enum Failure {
    /// Could not ask (exit 1).
    CouldNotRun(String),
    /// The server said no (exit 2), with its error body.
    Refused(Value),
}

/// Sends one request built by `build` and reads its JSON answer (`null` for an empty success);
/// a non-2xx answer is a refusal.
pub fn call(
    server: &ServerArgs,
    build: impl FnOnce(&Client, &str) -> RequestBuilder,
) -> Result<Value, Failure> {
    let base = server.url.clone().unwrap_or_else(|| DEFAULT_URL.to_owned());
    let base = base.trim_end_matches('/');
    let token = token_or_local(server.token.clone()).ok_or_else(|| {
        Failure::CouldNotRun(
            "no credential: pass --token or set CRA_TOKEN (or run next to a local server's \
             ./cra-data)"
                .into(),
        )
    })?;
    // A long poll lasts up to 60 s: the timeout leaves room for it.
    let client = cra_runtime::tls::blocking_http_client()
        .timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| Failure::CouldNotRun(format!("cannot build the HTTP client: {e}")))?;
    let resp = build(&client, base)
        .bearer_auth(token)
        .send()
        .map_err(|e| {
            Failure::CouldNotRun(format!(
                "cannot reach the server at {base}: {}; is `cra serve` running there?",
                cra_runtime::tls::explain(&e)
            ))
        })?;
    let status = resp.status();
    let bytes = resp
        .bytes()
        .map_err(|e| Failure::CouldNotRun(format!("the server's answer broke off: {e}")))?;
    if bytes.is_empty() && status.is_success() {
        return Ok(Value::Null); // 204: done, nothing to say
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| {
        Failure::CouldNotRun(format!(
            "the server answered {status} with something that is not JSON: {}",
            String::from_utf8_lossy(&bytes)
        ))
    })?;
    if status.is_success() {
        Ok(v)
    } else {
        Err(Failure::Refused(v))
    }
}

/// The TLS flags of every command (global: they go anywhere on the command line). They apply to
/// every HTTPS and WSS connection the command opens, `cra serve`'s own (executors, witnesses)
/// included.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// Trust only the CA certificates in this PEM file for HTTPS and WSS servers (default: the
    /// system's roots).
    #[arg(long, global = true, env = "CRA_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Present this PEM certificate chain to servers that require one (mutual TLS).
    #[arg(
        long,
        global = true,
        env = "CRA_CLIENT_CERT",
        value_name = "FILE",
        requires = "client_key"
    )]
    pub client_cert: Option<PathBuf>,
    /// The private key of --client-cert (PEM).
    #[arg(
        long,
        global = true,
        env = "CRA_CLIENT_KEY",
        value_name = "FILE",
        requires = "client_cert"
    )]
    pub client_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The client settings these flags describe.
    pub fn client_tls(&self) -> cra_runtime::tls::ClientTls {
        cra_runtime::tls::ClientTls {
            ca_cert: self.ca_cert.clone(),
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
        }
    }
}

/// Percent-encodes one path segment or query value (RFC 3986 unreserved characters kept).
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreserved_characters_stay_and_the_rest_is_encoded() {
        assert_eq!(enc("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(enc("a/b c?é"), "a%2Fb%20c%3F%C3%A9");
    }
}

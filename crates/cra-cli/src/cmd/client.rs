//! What the commands that call a running server share: the address they default to, the
//! credential they fall back to, the TLS flags every command takes, and the percent-encoding of
//! path segments and query values.

use std::path::{Path, PathBuf};

/// `cra serve`'s default address, where a command without `--url` (or `CRA_URL`) looks.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8421";

/// The token given (by a flag or `CRA_TOKEN`), else the admin key a local server wrote into
/// `./cra-data`; `None` when there is neither.
pub fn token_or_local(given: Option<String>) -> Option<String> {
    given.or_else(|| cra_runtime::auth::local_admin_token(Path::new("./cra-data")))
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
